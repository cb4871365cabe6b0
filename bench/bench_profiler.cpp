// Profiler costs (Google Benchmark), on the simulated device:
//
// - BM_ProfileContext*: one profiled scope, entry + exit, recording its result (no device
//   synchronize; on "sim:N" there is nothing to wait for). Goal: <= 200 ns.
// - BM_AllocLoop/monitor:{0,1}: an allocation-heavy loop without and with the background
//   monitor sampling at 1 kHz; BM_MonitorOverhead runs the two alternately in one benchmark
//   and reports the slowdown as a counter (goal: <= 1%).
//
//   bench_profiler --benchmark_min_time=0.5 --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/profiler/profiler.hpp"

namespace gmp = gpumemprof;

namespace {

using SimAllocator = gmp::CachingAllocator<gmp::SimulatedBackend>;

// libstdc++ skips mutex operations while a process has only ever had one thread; a CUDA program
// never is such a process (the runtime starts threads), and starting the monitor would switch
// the mode mid-measurement. So every benchmark here runs in a process that has had a thread.
const bool multithreaded = [] {
  std::thread([] {}).join();
  return true;
}();

SimAllocator& sim_allocator() {
  static SimAllocator a(gmp::SimulatedBackend(gmp::SimulatedOptions{}), gmp::AllocatorConfig{});
  return a;
}

// The profiler keeps its last max_results results in a ring; a slot's first use costs page faults
// (the kernel's price, paid once per slot), so a short run over the default 100,000 slots would
// measure mostly that. A ring of 1,024 wraps within the first millisecond: the steady state of a
// training loop, which is what a scope costs.
void profile_scopes(benchmark::State& state, gmp::ProfilerOptions options) {
  options.synchronize = false;
  options.max_results = 1024;
  gmp::GPUMemoryProfiler profiler(sim_allocator(), options);
  for (auto _ : state) {
    auto scope = profiler.profile_context("forward");
    benchmark::DoNotOptimize(&scope);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ProfileContext(benchmark::State& state) { profile_scopes(state, {}); }
BENCHMARK(BM_ProfileContext);

void BM_ProfileContext_NoTensorCounts(benchmark::State& state) { profile_scopes(state, {.track_tensors = false}); }
BENCHMARK(BM_ProfileContext_NoTensorCounts);

// Reading the RSS costs one pread of /proc/self/statm at each end.
void BM_ProfileContext_CpuMemory(benchmark::State& state) { profile_scopes(state, {.track_cpu_memory = true}); }
BENCHMARK(BM_ProfileContext_CpuMemory);

// Device level reads the device's used memory (here the simulated device's, under its lock).
void BM_ProfileContext_DeviceLevel(benchmark::State& state) {
  profile_scopes(state, {.level = gmp::ProfileLevel::device});
}
BENCHMARK(BM_ProfileContext_DeviceLevel);

void BM_ProfileFunction(benchmark::State& state) {
  gmp::GPUMemoryProfiler profiler(sim_allocator(), {.synchronize = false});
  int calls = 0;
  for (auto _ : state) {
    auto r = profiler.profile_function("step", [&] { ++calls; });
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ProfileFunction);

// For scale: what two clock reads cost on this machine.
void BM_TwoClockReads(benchmark::State& state) {
  for (auto _ : state) {
    auto a = std::chrono::steady_clock::now();
    auto b = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_TwoClockReads);

// ------------------------------------------------------------------------------------------------
// Monitoring overhead

// 1024 allocate/free pairs of mixed sizes, all from the allocator's cache after the first round.
void alloc_batch(SimAllocator& a) {
  static constexpr std::array<std::size_t, 8> sizes = {512, 4096, 65536, 1 << 20, 3 << 20, 256, 8192, 12 << 20};
  std::array<void*, 16> live{};
  for (std::size_t i = 0; i < 1024; ++i) {
    const std::size_t slot = i % live.size();
    if (live[slot] != nullptr) a.deallocate(live[slot]);
    live[slot] = a.allocate(sizes[i % sizes.size()]);
  }
  for (void* p : live) a.deallocate(p);
}

void BM_AllocLoop(benchmark::State& state) {
  SimAllocator& a = sim_allocator();
  gmp::GPUMemoryProfiler profiler(a, {.synchronize = false});
  if (state.range(0) != 0) profiler.start_monitoring(std::chrono::milliseconds(1));
  for (auto _ : state) alloc_batch(a);
  profiler.stop_monitoring();
  state.counters["samples"] = static_cast<double>(profiler.snapshots().size());
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_AllocLoop)->ArgName("monitor")->Arg(0)->Arg(1)->UseRealTime();

// Alternates 50 ms of the loop without and with the 1 kHz monitor, `rounds` times, and reports
// the median of the per-round time ratios as overhead_pct (100 * (with / without - 1)).
void BM_MonitorOverhead(benchmark::State& state) {
  using clock = std::chrono::steady_clock;
  SimAllocator& a = sim_allocator();
  gmp::GPUMemoryProfiler profiler(a, {.synchronize = false});
  const auto run_for = [&](std::chrono::milliseconds span) {
    std::size_t batches = 0;
    const auto start = clock::now();
    while (clock::now() - start < span) {
      alloc_batch(a);
      ++batches;
    }
    return std::chrono::duration<double>(clock::now() - start).count() / static_cast<double>(batches);
  };
  std::vector<double> ratios;
  for (auto _ : state) {
    const double without = run_for(std::chrono::milliseconds(50));
    profiler.start_monitoring(std::chrono::milliseconds(1));
    const double with = run_for(std::chrono::milliseconds(50));
    profiler.stop_monitoring();
    ratios.push_back(with / without);
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters["overhead_pct"] = 100.0 * (ratios[ratios.size() / 2] - 1.0);
  state.counters["rounds"] = static_cast<double>(ratios.size());
  state.counters["samples"] = static_cast<double>(profiler.snapshots().size());
}
BENCHMARK(BM_MonitorOverhead)->Iterations(40)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
