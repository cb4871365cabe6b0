// One meaning of "step" and one number per quantity: a profiled "train_step" scope is an
// annotated range while history records (as PyTorch's record_function is), so the snapshot's
// steps are those scopes, numbered from 0; the leak detector's growth over a run equals the sum
// of the per-step growth over the same steps; the profiler's summary says where a change since
// its baseline happened rather than print two numbers that disagree.
#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "profiler_test_util.hpp"

TEST_CASE("steps: profiled train_step scopes are the snapshot's steps; leak growth = step growth") {
  SimDevice d;
  gmp::HistoryRecorder recorder(gmp::HistoryOptions{.context = gmp::HistoryContext::none});
  recorder.attach(d.allocator);
  gmp::GPUMemoryProfiler profiler(d.allocator);
  gmp::LeakDetector leaks(d.allocator);
  std::vector<void*> kept;
  constexpr int kSteps = 12;
  for (int k = 0; k < kSteps; ++k) {
    auto call = leaks.track("train_step");
    auto step = profiler.profile_context("train_step");
    profiler.profile_function("optimizer", [&] { d.free(d.alloc(4 * MiB)); });
    kept.push_back(d.alloc(2 * MiB));
  }
  const gmp::StepReport r = gmp::analyze_steps(gmp::snapshot(d.allocator), 0);
  CHECK(r.source == gmp::StepSource::annotations);
  REQUIRE(r.steps.size() == kSteps);  // "optimizer" scopes are no steps
  CHECK(r.steps[0].name == "train_step");
  std::int64_t after_warmup = 0;  // the leak detector leaves the first call out of its fit
  for (std::size_t k = 0; k < kSteps; ++k) {
    CHECK(r.steps[k].growth_bytes == 2 * iMiB);
    if (k >= 1) after_warmup += r.steps[k].growth_bytes;
  }
  const gmp::LeakReport report = leaks.report();
  REQUIRE(report.growth.size() == 1);
  CHECK(report.growth[0].leak_suspected);
  CHECK(report.growth[0].calls_fitted == kSteps - 1);
  CHECK(report.growth[0].growth == after_warmup);
  CHECK(report.growth[0].reason.find("22.00 MiB over the last 11 calls") != std::string::npos);
  for (void* p : kept) d.free(p);
}

TEST_CASE("summary: a change since the baseline made outside finished calls is said to be so") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  profiler.profile_function("load", [&] { d.free(d.alloc(MiB)); });
  auto open = profiler.profile_context("open_scope");
  void* p = d.alloc(100 * MiB);
  const std::string table = gmp::format_summary(profiler.get_summary());
  INFO(table);
  CHECK(table.find("net change in those calls 0 bytes") != std::string::npos);
  CHECK(table.find("(+100.00 MiB, of which +100.00 MiB outside finished profiled calls)") != std::string::npos);
  (void)open.stop();
  const std::string after = gmp::format_summary(profiler.get_summary());
  INFO(after);
  CHECK(after.find("net change in those calls +100.00 MiB") != std::string::npos);
  CHECK(after.find("outside finished profiled calls") == std::string::npos);  // nothing left unexplained
  d.free(p);
}
