// The demo's training step (examples/demo.hpp) as a benchmark with memory counters: time per
// step and, from gpumemprof::testing::MemoryCounters, the loop's peak allocated and reserved
// bytes and the allocations and bytes per step. Run as a quick test in CI; the simulated device
// makes the memory figures exact on any machine.
#include <benchmark/benchmark.h>

#include "demo.hpp"
#include "gpumemprof/testing/benchmark.hpp"

namespace {

void BM_DemoTrainStep(benchmark::State& state) {
  gpumemprof_demo::DemoOptions options;
  options.device = "sim:0";
  options.batch = static_cast<int>(state.range(0));
  gpumemprof_demo::DemoTrainer trainer(options);
  trainer.step();  // momentum buffers: created once, not part of the steady state
  gpumemprof::testing::MemoryCounters mem(state, options.device);
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step());
}
BENCHMARK(BM_DemoTrainStep)->Arg(64)->Arg(256);

}  // namespace

BENCHMARK_MAIN();
