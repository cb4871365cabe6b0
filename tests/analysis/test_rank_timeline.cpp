// One rank's run reduced for the cross-rank page (analysis/rank_timeline.hpp): the step-aligned
// axis, and a long trace cut into a bounded number of points that keep its peaks.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/rank_timeline.hpp"

namespace gmp = gpumemprof;

namespace {

gmp::StepFacts step_range(std::int64_t start_us, std::int64_t end_us) {
  gmp::StepFacts s;
  s.start_us = start_us;
  s.end_us = end_us;
  return s;
}

/// `n` pairs of alloc + free of 1000 bytes, one µs apart, over 4096 bytes held throughout; at
/// pair `spike` the allocation is 1 MiB instead. Annotated as `steps` equal "step k" ranges.
gmp::Snapshot spiky_trace(int n, int spike, int steps) {
  gmp::Snapshot s;
  s.device_traces.resize(2);  // device 0 without a trace: the rank's device is 1
  auto& trace = s.device_traces[1];
  std::int64_t t = 5'000'000;
  const auto add = [&](gmp::TraceAction a, std::uint64_t addr, std::uint64_t size) {
    gmp::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.time_us = t++;
    trace.push_back(e);
  };
  add(gmp::TraceAction::segment_alloc, 0x100000, 4u << 20);
  add(gmp::TraceAction::alloc, 0x100000, 4096);
  for (int i = 0; i < n; ++i) {
    if (steps > 0 && i % (n / steps) == 0)
      s.external_annotations.push_back({"step " + std::to_string(i / (n / steps)), true, 1, t});
    const std::uint64_t size = i == spike ? 1u << 20 : 1000;
    add(gmp::TraceAction::alloc, 0x200000, size);
    add(gmp::TraceAction::free_requested, 0x200000, size);
    add(gmp::TraceAction::free_completed, 0x200000, size);
    if (steps > 0 && (i + 1) % (n / steps) == 0)
      s.external_annotations.push_back({"step " + std::to_string(i / (n / steps)), false, 1, t});
  }
  return s;
}

}  // namespace

TEST_CASE("rank timeline: step k starts at x = k, linear inside each step, squeezed outside") {
  const std::vector<gmp::StepFacts> steps{step_range(100, 180), step_range(200, 280), step_range(300, 350)};
  const gmp::StepAxis x(steps);
  CHECK(x(100) == 0.0);
  CHECK(x(150) == 0.5);
  CHECK(x(200) == 1.0);
  CHECK(x(250) == 1.5);
  CHECK(x(325) == 2.5);  // the last step runs to its end: 50 µs long
  CHECK(x(350) == 3.0);
  // Outside, median steps (100 µs) squeezed into under half a unit: half a step is 0.25.
  CHECK(x(400) == 3.25);
  CHECK(x(50) == -0.25);
  // Issue 29: a lead-in of 140 steps (a DDP run's start-up) took 140 of the axis's 143 units,
  // leaving the real steps 5% of the width; now it is a sliver, and still in order.
  CHECK(x(100 - 140 * 100) > -0.5);
  CHECK(x(100 - 140 * 100) < x(100 - 100 * 100));
  CHECK(x(1000000) < 3.5);
  CHECK(x.step_end(steps, 0) == 0.8);
  CHECK(x.step_end(steps, 2) == 3.0);

  // A step of no length, and no steps at all: no division by zero.
  const std::vector<gmp::StepFacts> empty_first{step_range(100, 100), step_range(100, 200)};
  const gmp::StepAxis y(empty_first);
  CHECK(y(100) == 1.0);
  CHECK(y(150) == 1.5);
  CHECK(y.step_end(empty_first, 0) == 0.0);
  const gmp::StepAxis none({});
  CHECK(none(7) == 7.0);
}

TEST_CASE("rank timeline: at most max_points buckets, each keeping its highest levels") {
  const gmp::Snapshot s = spiky_trace(20000, 12345, 4);
  const gmp::RankTimeline r = gmp::rank_timeline(s, 100);
  REQUIRE(r.device == 1);
  CHECK(r.first_us == 5'000'000);
  CHECK(r.last_us == 5'000'000 + 2 + 3 * 20000 - 1);
  CHECK(r.points.size() <= 101);  // the level before the trace, then one per bucket
  CHECK(r.points.size() >= 100);
  CHECK(r.points.front().time_us == r.first_us);
  CHECK(std::is_sorted(r.points.begin(), r.points.end(),
                       [](const auto& a, const auto& b) { return a.time_us < b.time_us; }));
  // The 1 MiB spike lasts one entry, yet its bucket shows it; the others show the 1000 B ones.
  std::int64_t top = 0;
  std::size_t spikes = 0;
  for (const gmp::RankTimelinePoint& p : r.points) {
    top = std::max(top, p.requested_in_use);
    spikes += p.requested_in_use > 4096 + 1000 ? 1 : 0;
    CHECK(p.reserved == 4 << 20);
  }
  CHECK(top == 4096 + (1 << 20));
  CHECK(spikes == 1);
  CHECK(r.peaks.requested_in_use == 4096 + (1 << 20));
  CHECK(r.peaks.reserved == 4 << 20);
  CHECK(r.steps_from == gmp::StepSource::annotations);
  REQUIRE(r.steps.size() == 4);
  CHECK(r.steps[1].name == "step 1");

  const gmp::RankTimeline whole = gmp::rank_timeline(s, 1'000'000);  // more buckets than entries
  CHECK(whole.points.size() == 2 + 3 * 20000);  // the first entry shares its bucket with the level before the trace

  const gmp::RankTimeline blank = gmp::rank_timeline(gmp::Snapshot{});
  CHECK_FALSE(blank.has_trace());
  CHECK(blank.points.empty());
}
