// MemoryTracker: usage thresholds (fraction and bytes), jumps, fragmentation, edge triggering,
// callbacks with the triggering sample, the event log and background tracking.
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/profiler/tracker.hpp"
#include "profiler_test_util.hpp"

namespace {

gmp::MemorySnapshot sample(std::int64_t allocated_mib, std::int64_t reserved_mib, std::int64_t inactive_mib = 0) {
  gmp::MemorySnapshot s;
  s.allocated_memory = allocated_mib * iMiB;
  s.reserved_memory = reserved_mib * iMiB;
  s.active_memory = s.allocated_memory;
  s.inactive_memory = inactive_mib * iMiB;
  return s;
}

std::vector<gmp::AlertKind> kinds(const std::vector<gmp::TrackingEvent>& events) {
  std::vector<gmp::AlertKind> out;
  for (const auto& e : events) out.push_back(e.alert);
  return out;
}

/// A tracker of a 1 GiB simulated device with only the rules a test turns on.
gmp::AlertThresholds none() {
  return {.warning_fraction = 0, .critical_fraction = 0, .jump_bytes = 0, .fragmentation_ratio = 0};
}

}  // namespace

TEST_CASE("tracker: usage alerts fire when a level is reached and re-arm when it clears") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.warning_fraction = 0.5;
  t.critical_fraction = 0.9;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  CHECK(tracker.capacity() == static_cast<std::int64_t>(GiB));
  std::vector<gmp::TrackingEvent> seen;
  tracker.add_alert_callback([&](const gmp::TrackingEvent& e) { seen.push_back(e); });

  for (const std::int64_t reserved : {100, 600, 700, 950, 960, 700, 100, 600}) tracker.process(sample(50, reserved));

  const auto alerts = tracker.get_events(gmp::TrackingEventType::warning);
  const auto critical = tracker.get_events(gmp::TrackingEventType::critical);
  REQUIRE(alerts.size() == 2);    // at 600, and at 600 again after falling to 100
  REQUIRE(critical.size() == 1);  // at 950
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].type == gmp::TrackingEventType::warning);
  CHECK(seen[0].alert == gmp::AlertKind::usage);
  CHECK(seen[0].sample.reserved_memory == 600 * iMiB);  // the triggering sample
  CHECK(seen[0].threshold == Approx(0.5 * GiB));
  CHECK(seen[0].value == Approx(600.0 * MiB));
  CHECK(seen[1].type == gmp::TrackingEventType::critical);
  CHECK(seen[1].sample.reserved_memory == 950 * iMiB);
  CHECK(seen[1].message.find("CRITICAL") != std::string::npos);
  CHECK(seen[2].sample.reserved_memory == 600 * iMiB);
  CHECK(tracker.get_statistics().alert_count == 3);
}

TEST_CASE("tracker: absolute limits, the lower of fraction and bytes, and the usage measure") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.warning_fraction = 0.8;
  t.warning_bytes = 200 * iMiB;  // lower than 80% of 1 GiB: applies
  t.usage = gmp::UsageMeasure::allocated;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  tracker.process(sample(150, 900));  // reserved is high, allocated is not
  CHECK(tracker.get_events(gmp::TrackingEventType::warning).empty());
  tracker.process(sample(210, 900));
  const auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 1);
  CHECK(w[0].threshold == Approx(200.0 * MiB));
  CHECK(w[0].sample.allocated_memory == 210 * iMiB);
}

TEST_CASE("tracker: a single large jump between samples warns every time") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.jump_bytes = 50 * iMiB;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  for (const std::int64_t a : {10, 70, 100, 40, 95, 200}) tracker.process(sample(a, 256));
  const auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 3);  // +60, +55, +105; +30 is below the limit, -60 is a drop
  CHECK(kinds(w) == std::vector<gmp::AlertKind>(3, gmp::AlertKind::jump));
  CHECK(w[0].memory_change == 60 * iMiB);
  CHECK(w[2].value == Approx(105.0 * MiB));
}

TEST_CASE("tracker: fragmentation by unallocated reserve or by inactive split blocks") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.fragmentation_ratio = 0.3;
  t.fragmentation = gmp::FragmentationMeasure::reserved_unallocated;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  tracker.process(sample(1, 10));     // tiny reserve: ignored (below 64 MiB)
  tracker.process(sample(100, 200));  // 50%: warns
  tracker.process(sample(90, 200));   // still fragmented: no repeat
  tracker.process(sample(190, 200));  // clears
  tracker.process(sample(100, 200));  // warns again
  auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 2);
  CHECK(w[0].alert == gmp::AlertKind::fragmentation);
  CHECK(w[0].value == Approx(0.5));
  CHECK(w[1].sample.allocated_memory == 100 * iMiB);

  t.fragmentation = gmp::FragmentationMeasure::inactive_split;
  gmp::MemoryTracker split(d.allocator, {.thresholds = t});
  split.process(sample(100, 200, 10));  // 5% in split slivers: fine
  split.process(sample(100, 200, 80));  // 40%
  w = split.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 1);
  CHECK(w[0].value == Approx(0.4));
  CHECK(w[0].message.find("inactive split") != std::string::npos);
}

TEST_CASE("tracker: fragmentation by default is the reports' one definition, over the segments") {
  // 40 blocks of 2 MiB fill four 20 MiB segments; freeing every other one leaves 40 MiB free in
  // 20 separate 2 MiB holes: external fragmentation 1 - 2/40 = 95%.
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.fragmentation_ratio = 0.5;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  CHECK(tracker.thresholds().fragmentation == gmp::FragmentationMeasure::external);
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(d.alloc(2 * MiB));
  tracker.sample_now();  // nothing free: n/a, no alert
  for (std::size_t i = 0; i < blocks.size(); i += 2) d.free(blocks[i]);
  d.allocator.validate();
  tracker.sample_now();
  tracker.sample_now();  // still fragmented: no repeat
  auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 1);
  CHECK(w[0].alert == gmp::AlertKind::fragmentation);
  CHECK(w[0].value == Approx(0.95));
  CHECK(w[0].message ==
        "high fragmentation: external 95.0% (1 - largest free block 2.00 MiB / free 40.00 MiB; limit 50.0%)");
  for (std::size_t i = 1; i < blocks.size(); i += 2) d.free(blocks[i]);
  tracker.sample_now();  // nothing live: n/a, re-armed
  d.free(d.alloc(2 * MiB));
  CHECK(tracker.get_events(gmp::TrackingEventType::warning).size() == 1);
  CHECK(tracker.get_statistics().peak_memory == 80 * iMiB);  // the allocator's peak, not a sample's
}

TEST_CASE("tracker: callbacks, their errors, removal; alerts can be switched off") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.jump_bytes = iMiB;
  gmp::MemoryTracker tracker(d.allocator, {.thresholds = t});
  int good = 0;
  const auto bad_id =
      tracker.add_alert_callback([](const gmp::TrackingEvent&) { throw std::runtime_error("callback bug"); });
  const auto good_id = tracker.add_alert_callback([&](const gmp::TrackingEvent&) { ++good; });
  tracker.process(sample(0, 64));
  tracker.process(sample(10, 64));
  CHECK(good == 1);  // the throwing callback does not stop the others
  const auto errors = tracker.get_events(gmp::TrackingEventType::error);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].message.find("callback bug") != std::string::npos);
  tracker.remove_alert_callback(bad_id);
  tracker.remove_alert_callback(good_id);
  tracker.process(sample(20, 64));
  CHECK(good == 1);
  CHECK(tracker.get_events(gmp::TrackingEventType::error).size() == 1);

  gmp::MemoryTracker quiet(d.allocator, {.enable_alerts = false, .thresholds = t});
  quiet.process(sample(0, 64));
  quiet.process(sample(500, 600));
  CHECK(quiet.get_events(gmp::TrackingEventType::warning).empty());
  CHECK(quiet.get_statistics().alert_count == 0);
}

TEST_CASE("tracker: the event log, its filters and the statistics") {
  SimDevice d;
  gmp::MemoryTracker tracker(d.allocator, {.max_events = 5, .thresholds = none()});
  for (const std::int64_t a : {10, 30, 20, 20, 50}) tracker.process(sample(a, 64));
  // 10 (first sample: a peak, no change), +20 (peak), -10, 0 (nothing), +30 (peak):
  // 2 allocation, 1 deallocation and 3 peak events.
  const auto all = tracker.get_events();
  CHECK(all.size() == 5);  // bounded: 6 logged
  const auto stats = tracker.get_statistics();
  CHECK(stats.events_dropped == 1);
  CHECK(stats.samples == 5);
  CHECK(stats.peak_memory == 50 * iMiB);
  CHECK(stats.current_memory == 50 * iMiB);
  CHECK(stats.total_allocations == 2);
  CHECK(stats.total_deallocations == 1);
  CHECK(stats.total_allocation_bytes == 50 * iMiB);
  CHECK(stats.total_deallocation_bytes == 10 * iMiB);
  const auto last_two = tracker.get_events(std::nullopt, 2);
  REQUIRE(last_two.size() == 2);
  CHECK(last_two[0].type == gmp::TrackingEventType::allocation);
  CHECK(last_two[0].memory_change == 30 * iMiB);
  CHECK(last_two[1].type == gmp::TrackingEventType::peak);
  CHECK(tracker.get_events(gmp::TrackingEventType::deallocation).size() == 1);
  tracker.clear_events();
  CHECK(tracker.get_events().empty());
  CHECK(tracker.get_statistics().samples == 0);
}

TEST_CASE("tracker: samples a real allocator and tracks in the background") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.warning_fraction = 0.8;
  gmp::MemoryTracker tracker(d.allocator, {.interval = std::chrono::milliseconds(1), .thresholds = t});
  void* big = d.alloc(900 * MiB);
  tracker.sample_now();
  auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 1);
  CHECK(w[0].sample.reserved_memory >= 900 * iMiB);
  CHECK(w[0].sample.device_used_memory.has_value());
  d.free(big);

  tracker.start_tracking();
  CHECK(tracker.is_tracking());
  REQUIRE(eventually([&] { return tracker.get_statistics().samples >= 4; }));
  tracker.stop_tracking();
  CHECK_FALSE(tracker.is_tracking());
  CHECK(tracker.get_events(gmp::TrackingEventType::start).size() == 1);
  CHECK(tracker.get_events(gmp::TrackingEventType::stop).size() == 1);
  CHECK(tracker.get_statistics().tracking_duration > 0.0);
  CHECK(tracker.get_events(gmp::TrackingEventType::deallocation).size() == 1);  // the 900 MiB free
}

TEST_CASE("tracker: device level compares the device's used memory") {
  SimDevice d;
  gmp::AlertThresholds t = none();
  t.warning_fraction = 0.8;
  t.jump_bytes = 100 * iMiB;
  gmp::MemoryTracker tracker(d.allocator, {.level = gmp::ProfileLevel::device, .thresholds = t});
  tracker.sample_now();
  d.sim().set_external_usage(900 * MiB);
  tracker.sample_now();
  const auto w = tracker.get_events(gmp::TrackingEventType::warning);
  REQUIRE(w.size() == 2);
  CHECK(kinds(w) == std::vector<gmp::AlertKind>{gmp::AlertKind::usage, gmp::AlertKind::jump});
  CHECK(w[0].sample.device_used_memory == 900 * iMiB);
  CHECK(w[0].memory_allocated == 900 * iMiB);
  CHECK_FALSE(w[0].sample.allocator_level);
}

TEST_CASE("tracker: constructs from a device name and from {}") {
  gmp::MemoryTracker by_name("sim:7");
  CHECK(by_name.source()->device_name() == "sim:7");
  gmp::MemoryTracker braces({});
  CHECK(braces.source() != nullptr);
  CHECK_THROWS_AS(gmp::MemoryTracker("sim:42"), gmp::DeviceError);
}
