// The allocator's event sinks and with_lock().
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

namespace {

struct Log {
  std::vector<gmp::AllocatorEvent> events;
  std::uint64_t next_handle = 100;
  static std::uint64_t on_event(void* user, const gmp::AllocatorEvent& e) noexcept {
    auto* self = static_cast<Log*>(user);
    self->events.push_back(e);
    const bool creates = e.action == gmp::TraceAction::alloc || e.action == gmp::TraceAction::segment_alloc;
    return creates ? self->next_handle++ : 0;
  }
  [[nodiscard]] gmp::AllocatorEventSink sink() { return {&Log::on_event, this}; }
};

}  // namespace

TEST_CASE("event sinks: every event, context handles kept with blocks and segments") {
  SimAlloc s;
  Log log;
  const std::size_t slot = s.a.add_event_sink(log.sink());
  CHECK(s.a.event_sink_count() == 1);
  void* p = s.a.allocate(1000);
  s.a.validate();
  REQUIRE(log.events.size() == 2);
  CHECK(log.events[0].action == gmp::TraceAction::segment_alloc);
  CHECK(log.events[0].size == 2 * MiB);
  CHECK(log.events[1].action == gmp::TraceAction::alloc);
  CHECK(log.events[1].size == 1000);
  const auto segs = s.a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].context == 100);
  CHECK(segs[0].blocks.at(0).context == 101);
  s.a.deallocate(p);
  s.a.validate();
  REQUIRE(log.events.size() == 4);
  CHECK(log.events[2].action == gmp::TraceAction::free_requested);
  CHECK(log.events[2].context == 101);
  CHECK(log.events[3].action == gmp::TraceAction::free_completed);
  s.a.empty_cache();
  REQUIRE(log.events.size() == 5);
  CHECK(log.events[4].action == gmp::TraceAction::segment_free);
  CHECK(log.events[4].context == 100);
  s.a.remove_event_sink(slot);
  CHECK(s.a.event_sink_count() == 0);
  s.a.deallocate(s.a.allocate(1000));
  CHECK(log.events.size() == 5);  // removed: never called again
  s.a.validate();
}

TEST_CASE("event sinks: a fixed number of slots; a full set is one clear error") {
  SimAlloc s;
  std::vector<Log> logs(gmp::detail::EventSinks::capacity + 1);
  for (std::size_t i = 0; i < gmp::detail::EventSinks::capacity; ++i) s.a.add_event_sink(logs[i].sink());
  CHECK_THROWS_AS(s.a.add_event_sink(logs.back().sink()), std::length_error);
  CHECK_THROWS_AS(s.a.add_event_sink({}), std::invalid_argument);
  s.a.remove_event_sink(99);  // unknown slot: ignored
  s.a.deallocate(s.a.allocate(1000));
  for (std::size_t i = 0; i < gmp::detail::EventSinks::capacity; ++i) CHECK(logs[i].events.size() == 4);
  CHECK(logs.back().events.empty());
  s.a.validate();
}

TEST_CASE("with_lock: segments and stats read at one instant") {
  SimAlloc s;
  void* p = s.a.allocate(3 * MiB);
  void* q = s.a.allocate(600);
  const auto [segments, reserved] = s.a.with_lock([](const SimAllocator::LockedView& v) {
    std::size_t n = 0;
    std::size_t bytes = 0;
    v.visit_segments([&](const gmp::SegmentView& seg) {
      ++n;
      bytes += seg.size;
    });
    return std::pair{n, bytes};
  });
  CHECK(segments == 2);
  CHECK(reserved == 22 * MiB);  // a 20 MiB large segment and a 2 MiB small one
  CHECK(static_cast<std::size_t>(s.a.with_lock([](const auto& v) { return v.stats().reserved_bytes.all().current; })) ==
        reserved);
  s.a.deallocate(p);
  s.a.deallocate(q);
  s.a.validate();
}
