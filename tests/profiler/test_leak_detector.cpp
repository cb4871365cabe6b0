// LeakDetector: steady growth is found, oscillation, k-buffering, lazy initialisation and a
// one-off step are not; survivors are grouped by allocation site (by stack when history
// records stacks). Deterministic: simulated device, fixed allocation patterns.
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "profiler_test_util.hpp"

namespace {

const gmp::MemoryGrowth& growth_of(const gmp::LeakReport& r, const std::string& name) {
  for (const auto& g : r.growth) {
    if (g.name == name) return g;
  }
  FAIL("no growth verdict for " << name);
  return r.growth.front();
}

std::deque<std::int64_t> series(std::initializer_list<std::int64_t> v) { return {v}; }

/// An allocation site of this file (not inlined, so its stack names this file).
GPUMEMPROF_NOINLINE void* allocate_here(SimDevice& d, std::size_t bytes) { return d.allocator.allocate(bytes); }

}  // namespace

TEST_CASE("leaks: the line fit and the steadiness test") {
  using gmp::detail::fit_line;
  const auto exact = fit_line(series({10, 20, 30, 40, 50}));
  CHECK(exact.slope == Approx(10.0));
  CHECK(std::isinf(exact.t_statistic));
  const auto flat = fit_line(series({7, 7, 7, 7}));
  CHECK(flat.slope == 0.0);
  CHECK(flat.t_statistic == 0.0);
  const auto alternating = fit_line(series({0, 100, 0, 100, 0, 100, 0, 100, 0, 100}));
  CHECK(alternating.slope == Approx(250.0 / 82.5));  // small, and
  CHECK(alternating.t_statistic < 1.0);              // far from significant
  CHECK(gmp::detail::segment_means_increase(series({1, 2, 3, 4, 5, 6, 7, 8}), 4));
  CHECK_FALSE(gmp::detail::segment_means_increase(series({0, 0, 0, 0, 0, 0, 9, 9}), 4));  // a late step
  CHECK_FALSE(gmp::detail::segment_means_increase(series({0, 1, 0, 1, 0, 1, 0, 1}), 4));
}

TEST_CASE("leaks: a call that keeps 1 MiB each time is found by growth and by survivors") {
  SimDevice d;
  gmp::LeakDetector leaks(d.allocator);
  std::vector<void*> leaked;
  for (int i = 0; i < 12; ++i) {
    auto call = leaks.track("train_step");
    void* scratch = d.alloc(8 * MiB);
    leaked.push_back(d.alloc(2 * MiB));  // the leak (2 MiB blocks pack exactly into 20 MiB segments)
    d.free(scratch);
  }
  const gmp::LeakReport report = leaks.report();
  CHECK(report.leak_suspected());
  const auto& g = growth_of(report, "train_step");
  CHECK(g.leak_suspected);
  CHECK(g.calls == 12);
  CHECK(g.calls_fitted == 11);  // one warm-up call left out
  CHECK(g.slope == Approx(2.0 * MiB));
  CHECK(g.growth == 22 * iMiB);  // 11 fitted calls of 2 MiB each, as the per-step table sums them
  CHECK(g.reason.find("grows") != std::string::npos);

  REQUIRE(report.survivors.size() == 1);
  const gmp::SurvivingAllocations& s = report.survivors[0];
  CHECK(s.leak_suspected);
  CHECK(s.name == "train_step");
  CHECK(s.requested_size == 2 * MiB);
  CHECK(s.blocks == 8);  // calls 0..7 have outlived 4 later calls
  CHECK(s.calls == 8);
  CHECK(s.first_call == 0);
  CHECK(s.last_call == 7);
  CHECK(s.bytes == 16 * iMiB);
  CHECK(s.addresses.front() == reinterpret_cast<std::uintptr_t>(leaked[0]));
  CHECK(s.site.find("requests of") != std::string::npos);
  CHECK(report.format().find("LEAK") != std::string::npos);
  for (void* p : leaked) d.free(p);
}

TEST_CASE("leaks: no false alarm for a steady loop whose memory oscillates") {
  SimDevice d;
  gmp::LeakDetector leaks(d.allocator);
  void* alternate = nullptr;        // kept on even calls, freed on odd ones
  std::deque<void*> double_buffer;  // each call's output lives through the next call
  for (int i = 0; i < 40; ++i) {
    auto call = leaks.track("step");
    void* activations = d.alloc(32 * MiB);
    if (i % 2 == 0) {
      alternate = d.alloc(16 * MiB);
    } else {
      d.free(alternate);
      alternate = nullptr;
    }
    double_buffer.push_back(d.alloc(4 * MiB));
    if (double_buffer.size() > 2) {
      d.free(double_buffer.front());
      double_buffer.pop_front();
    }
    d.free(activations);
  }
  const auto report = leaks.report();
  CHECK_FALSE(report.leak_suspected());
  CHECK_FALSE(growth_of(report, "step").leak_suspected);
  CHECK(report.survivors.empty());
  CHECK(report.format().find("No leak suspected") != std::string::npos);
  if (alternate != nullptr) d.free(alternate);
  for (void* p : double_buffer) d.free(p);
}

TEST_CASE("leaks: lazy initialisation and a one-off cache are kept, not leaks") {
  SimDevice d;
  gmp::LeakDetector leaks(d.allocator);
  void* momentum = nullptr;
  void* cache = nullptr;
  for (int i = 0; i < 30; ++i) {
    auto call = leaks.track("optimizer_step");
    if (momentum == nullptr) momentum = d.alloc(64 * MiB);  // first call only
    if (i == 20) cache = d.alloc(16 * MiB);                 // a one-off step late in the run
    d.free(d.alloc(8 * MiB));
  }
  const auto report = leaks.report();
  CHECK_FALSE(report.leak_suspected());
  const auto& g = growth_of(report, "optimizer_step");
  CHECK_FALSE(g.leak_suspected);
  REQUIRE(report.survivors.size() == 2);
  for (const auto& s : report.survivors) {
    CHECK_FALSE(s.leak_suspected);
    CHECK(s.calls == 1);
    CHECK(s.blocks == 1);
  }
  CHECK(report.survivors[0].first_call + report.survivors[1].first_call == 20);  // calls 0 and 20
  CHECK(report.format().find("kept") != std::string::npos);
  d.free(momentum);
  d.free(cache);
}

TEST_CASE("leaks: growth hidden in noise is still found; too few calls are not judged") {
  gmp::LeakDetector leaks;  // no source: growth from points only
  for (int i = 0; i < 20; ++i) leaks.add_point("noisy", i * iMiB + (i % 2) * 2 * iMiB);
  for (int i = 0; i < 5; ++i) leaks.add_point("young", i * iMiB);
  const auto report = leaks.report();
  const auto& noisy = growth_of(report, "noisy");
  CHECK(noisy.leak_suspected);
  CHECK(noisy.slope == Approx(static_cast<double>(MiB)).epsilon(0.2));
  CHECK(noisy.t_statistic > 4.0);
  const auto& young = growth_of(report, "young");
  CHECK_FALSE(young.leak_suspected);
  CHECK(young.reason.find("not judged") != std::string::npos);
  CHECK_THROWS_AS(leaks.track("x"), std::logic_error);  // survivors need a source
}

TEST_CASE("leaks: tolerance and the window") {
  gmp::LeakDetector tolerant(nullptr, {.tolerance_bytes = 64 * iMiB});
  gmp::LeakDetector strict(nullptr, {.window = 10});
  for (int i = 0; i < 30; ++i) {
    tolerant.add_point("small_growth", i * 1024);
    // Grew during the first 20 calls, then flat: the newest 10 calls show no growth.
    strict.add_point("healed", std::min(i, 20) * iMiB);
  }
  CHECK_FALSE(tolerant.report().leak_suspected());
  CHECK(growth_of(tolerant.report(), "small_growth").reason.find("tolerance") != std::string::npos);
  CHECK_FALSE(strict.report().leak_suspected());
  CHECK(growth_of(strict.report(), "healed").calls_fitted == 10);
}

TEST_CASE("leaks: profiler results feed the growth series") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  std::vector<void*> leaked;
  for (int i = 0; i < 10; ++i) profiler.profile_function("forward", [&] { leaked.push_back(d.alloc(2 * MiB)); });
  gmp::LeakDetector leaks;
  leaks.observe(profiler.results());
  const gmp::LeakReport report = leaks.report();
  const auto& g = growth_of(report, "forward");
  CHECK(g.leak_suspected);
  CHECK(g.slope == Approx(2.0 * MiB));
  for (void* p : leaked) d.free(p);
}

TEST_CASE("leaks: track() and observe() on the same calls count each call once") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  gmp::LeakDetector leaks(d.allocator);
  std::vector<void*> leaked;
  auto step = [&] { leaked.push_back(d.alloc(1 * MiB)); };
  // Both nestings: track() around the profiled call, and the profiled call around track().
  for (int i = 0; i < 10; ++i) {
    auto call = leaks.track("step");
    leaks.observe(profiler.profile_function("step", step));
  }
  for (int i = 0; i < 10; ++i) {
    leaks.observe(profiler.profile_function("inner", [&] {
      auto call = leaks.track("inner");
      step();
    }));
  }
  // And the results observed in one batch after the tracked loop.
  gmp::GPUMemoryProfiler batch_profiler(d.allocator);
  for (int i = 0; i < 10; ++i) {
    auto call = leaks.track("batch");
    batch_profiler.profile_function("batch", step);
  }
  leaks.observe(batch_profiler.results());
  const gmp::LeakReport report = leaks.report();
  for (const char* name : {"step", "inner", "batch"}) {
    INFO(name);
    const auto& g = growth_of(report, name);
    CHECK(g.calls == 10);
    CHECK(g.calls_fitted == 9);
    CHECK(g.slope == Approx(1.0 * MiB));
    CHECK(g.leak_suspected);
    // An exact line: no "t = inf", and PyTorch's units without "1024.00 KiB".
    CHECK(g.reason.rfind("grows 1.00 MiB per call (the same every call), 9.00 MiB over the last 9 calls", 0) == 0);
  }
  CHECK(report.format().find("10 calls") != std::string::npos);
  for (void* p : leaked) d.free(p);
}

TEST_CASE("leaks: device level follows the device's used memory") {
  SimDevice d;
  gmp::LeakDetector leaks(gmp::make_memory_source(d.allocator, gmp::ProfileLevel::device));
  for (std::size_t i = 0; i < 10; ++i) {
    auto call = leaks.track("external");
    d.sim().set_external_usage(i * 4 * MiB);
  }
  const auto report = leaks.report();
  CHECK(growth_of(report, "external").leak_suspected);
  CHECK(report.survivors.empty());
}

TEST_CASE("leaks: survivors name their allocation stack when history records stacks") {
  if (!gmp::stacks_available) return;
  SimDevice d;
  gmp::HistoryRecorder recorder({.enabled = gmp::HistoryEnabled::all, .context = gmp::HistoryContext::alloc});
  recorder.attach(d.allocator);
  gmp::LeakDetector leaks(d.allocator);
  std::vector<void*> leaked;
  for (int i = 0; i < 10; ++i) {
    auto call = leaks.track("step");
    leaked.push_back(allocate_here(d, 3 * MiB));
  }
  const auto report = leaks.report();
  REQUIRE(report.survivors.size() == 1);
  const auto& s = report.survivors[0];
  CHECK(s.leak_suspected);
  CHECK(s.context != 0);
  REQUIRE(s.frames != nullptr);
  bool names_this_file = false;
  for (const auto& f : *s.frames)
    names_this_file = names_this_file || f.filename.find("test_leak_detector.cpp") != std::string::npos;
  CHECK(names_this_file);
  CHECK(s.site.find(" at ") != std::string::npos);  // a frame, not a size
  recorder.detach();
  for (void* p : leaked) d.free(p);
}
