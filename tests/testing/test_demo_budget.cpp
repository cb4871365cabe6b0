// The project's own memory budget: the demo's training step (examples/demo.hpp) on a simulated
// device must stay within its measured peak, allocation count and zero net growth. The budgets
// are the figures measured when they were set (see below) plus a small margin, so a change that
// makes a training step hold more memory or allocate more fails CI.
#include <cmath>

#include "catch.hpp"
#include "demo.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/testing/catch2.hpp"

namespace gmp = gpumemprof;
using namespace gmp::literals;

TEST_CASE("the demo's training step stays within its memory budget") {
  gpumemprof_demo::DemoOptions options;  // the demo's defaults: MLP 784-1024-1024-10, batch 64
  options.device = "sim:6";
  gpumemprof_demo::DemoTrainer trainer(options);
  gmp::GPUMemoryProfiler profiler("sim:6");

  // The first step also creates the momentum buffers, which stay (like torch.optim.SGD's state).
  const gmp::ProfileResult first = profiler.profile_function("first_step", [&] { trainer.step(); });
  const gmp::ProfileResult r = profiler.profile_function("train_step", [&] { trainer.step(); });
  INFO("first step: " << Catch::Detail::stringify(first));
  INFO("steady step: " << Catch::Detail::stringify(r));
  CHECK(r.execution_time >= 0.0);
  CHECK_THAT(first, gmp::testing::NoNetGrowth(8_MiB));
  // Measured 2026-11-23 (sim:6, any machine: the simulated device is deterministic): a steady
  // step peaks at 21.75 MiB (weights 7.10 MiB + momentum 7.10 MiB + the step's tensors) with 15
  // allocations; the first step leaves the 7.10 MiB of momentum behind.
  CHECK_THAT(r, gmp::testing::PeakBelow(22_MiB));
  CHECK_THAT(r, gmp::testing::NoNetGrowth());
  CHECK_THAT(r, gmp::testing::AllocationsAtMost(16));
  gmp::default_allocator("sim:6").validate();
}
