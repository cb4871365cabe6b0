// Training steps (analysis/steps.hpp): from annotated ranges or from the repeating allocation
// pattern, with exact per-step peaks, held bytes and growth, and the site of a leak.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/steps.hpp"

namespace gmp = gpumemprof;
using gmp::TraceAction;

namespace {

gmp::Frames site(const char* file, int line, const char* function) {
  return std::make_shared<const std::vector<gmp::Frame>>(std::vector<gmp::Frame>{{file, line, function}});
}

/// A training loop's trace: each step allocates its batch (4096 B) and a temporary (10000 B),
/// frees both, and keeps a cache entry of `leak` bytes it never frees; the first step also
/// creates 50000 B of optimizer state that lives on. Annotated as "step N" when `annotate`.
gmp::Snapshot training_loop(int steps, std::uint64_t leak, bool annotate) {
  const gmp::Frames batch = site("train.cpp", 10, "load_batch");
  const gmp::Frames temp = site("train.cpp", 20, "forward");
  const gmp::Frames cache = site("cache.cpp", 7, "remember");
  const gmp::Frames state = site("optim.cpp", 3, "init_state");
  gmp::Snapshot s;
  s.device_traces.emplace_back();
  auto& trace = s.device_traces[0];
  std::int64_t t = 1000;
  const auto add = [&](TraceAction a, std::uint64_t addr, std::uint64_t size, const gmp::Frames& f) {
    gmp::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.time_us = t++;
    e.frames = f;
    trace.push_back(e);
  };
  for (int k = 0; k < steps; ++k) {
    if (annotate) s.external_annotations.push_back({"step " + std::to_string(k), true, 0, t++});
    add(TraceAction::alloc, 0x1000, 4096, batch);
    add(TraceAction::alloc, 0x9000, 10000, temp);
    if (k == 0) add(TraceAction::alloc, 0x50000, 50000, state);
    add(TraceAction::free_requested, 0x9000, 10000, temp);
    add(TraceAction::free_completed, 0x9000, 10000, temp);
    add(TraceAction::alloc, 0x100000 + 0x1000 * static_cast<std::uint64_t>(k), leak, cache);
    add(TraceAction::free_requested, 0x1000, 4096, batch);
    add(TraceAction::free_completed, 0x1000, 4096, batch);
    if (annotate) s.external_annotations.push_back({"step " + std::to_string(k), false, 0, t++});
  }
  return s;
}

void check_leak_steps(const gmp::StepReport& r, std::uint64_t leak) {
  const auto n = static_cast<std::int64_t>(leak);
  REQUIRE(r.steps.size() == 4);
  // Step 0: 4096 + 10000 + 50000 held at once; ends with the state and one leak.
  CHECK(r.steps[0].start_bytes == 0);
  CHECK(r.steps[0].peak_bytes == 64096);
  CHECK(r.steps[0].end_bytes == 50000 + n);
  CHECK(r.steps[0].growth_bytes == 50000 + n);
  for (std::size_t k = 1; k < 4; ++k) {
    const auto held = 50000 + static_cast<std::int64_t>(k) * n;  // at the step's start
    CHECK(r.steps[k].start_bytes == held);
    CHECK(r.steps[k].peak_bytes == held + 14096);
    CHECK(r.steps[k].end_bytes == held + n);
    CHECK(r.steps[k].growth_bytes == n);
  }
  REQUIRE(r.growing_sites.size() == 1);  // not the state (step 0 only), not the freed ones
  CHECK(r.growing_sites[0].site == "remember at cache.cpp:7");
  CHECK(r.growing_sites[0].per_step == std::vector<std::int64_t>{n, n, n, n});
  CHECK(r.growing_sites[0].total == 3 * n);
}

}  // namespace

TEST_CASE("steps: annotated steps give exact peaks, held bytes, growth and the leaking site") {
  const gmp::Snapshot s = training_loop(4, 3000, true);
  const gmp::StepReport r = gmp::analyze_steps(s, 0);
  CHECK(r.source == gmp::StepSource::annotations);
  check_leak_steps(r, 3000);
  CHECK(r.steps[2].name == "step 2");
  CHECK(r.steps[2].entries == 7);
  CHECK(r.steps[1].end_us > r.steps[1].start_us);
}

TEST_CASE("steps: without annotations, the repeating allocation pattern marks the steps") {
  const gmp::Snapshot s = training_loop(4, 3000, false);
  const gmp::StepReport r = gmp::analyze_steps(s, 0);
  CHECK(r.source == gmp::StepSource::detected);
  CHECK(r.period == 3);  // batch, temporary, cache entry
  check_leak_steps(r, 3000);
  CHECK(r.steps[0].name == "step 0");
  CHECK(r.steps[0].entries == 8);  // the state's allocation too
  CHECK(r.steps[3].entries == 7);
  CHECK(r.steps[3].start_us == s.device_traces[0][22].time_us);
}

TEST_CASE("steps: a steady loop without a leak has no growing site; no pattern, no steps") {
  const gmp::StepReport steady = gmp::analyze_steps(training_loop(5, 0, false), 0);
  CHECK(steady.source == gmp::StepSource::detected);
  REQUIRE(steady.steps.size() == 5);
  // A zero-byte "leak" allocation still counts as an allocation; nothing grows after step 0.
  CHECK(steady.growing_sites.empty());
  CHECK(steady.steps[4].growth_bytes == 0);

  gmp::Snapshot once = training_loop(2, 3000, false);  // two repetitions: not yet a pattern
  CHECK(gmp::analyze_steps(once, 0).source == gmp::StepSource::none);
  CHECK(gmp::analyze_steps(once, 0).steps.empty());
  CHECK(gmp::analyze_steps(once, 3).steps.empty());  // a device without a trace
}
