// Layer 6: Google Benchmark counters for the memory a benchmark's loop uses.
//
//   static void BM_step(benchmark::State& state) {
//     Model model = setup();                                   // not counted
//     gpumemprof::testing::MemoryCounters mem(state, "sim:0"); // right before the loop
//     for (auto _ : state) step(model);
//   }                                                          // counters added here
//
// Counters (plain values, per benchmark run):
//   peak_bytes          the highest allocated bytes during the loop (absolute, like
//                       max_memory_allocated after a reset at the loop's start)
//   reserved_peak_bytes the highest reserved bytes during the loop
//   allocs_per_iter     allocations per iteration
//   bytes_per_iter      bytes allocated (rounded block sizes, gross) per iteration
//
// The allocated peak comes from a peak window of its own; the reserved peak needs the device's
// peak statistics reset when the counters are created (as torch.cuda.reset_peak_memory_stats()).
// Counting ends when the object is destroyed, so create it right before the loop, in the scope
// that ends with it.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace testing {

class MemoryCounters {
 public:
  /// Starts counting on `device`'s default allocator (default: the current device).
  explicit MemoryCounters(benchmark::State& state, const Device& device = Device())
      : state_(&state), allocator_(&default_allocator(device)) {
    allocator_->reset_peak_memory_stats();
    start_ = allocator_->gauges();
    window_ = allocator_->open_peak_window();
  }
  MemoryCounters(const MemoryCounters&) = delete;
  MemoryCounters& operator=(const MemoryCounters&) = delete;
  MemoryCounters(MemoryCounters&&) = delete;
  MemoryCounters& operator=(MemoryCounters&&) = delete;

  /// Adds the counters to the benchmark's state.
  ~MemoryCounters() {
    const std::int64_t peak = allocator_->close_peak_window(window_);
    const AllocatorGauges end = allocator_->gauges();
    const auto reserved_peak = allocator_->memory_stats().reserved_bytes.all().peak;
    const double iterations = state_->iterations() > 0 ? static_cast<double>(state_->iterations()) : 1.0;
    constexpr auto plain = benchmark::Counter::kDefaults;
    constexpr auto binary = benchmark::Counter::OneK::kIs1024;  // bytes print as Ki/Mi/Gi
    auto& c = state_->counters;
    c["peak_bytes"] = benchmark::Counter(static_cast<double>(peak), plain, binary);
    c["reserved_peak_bytes"] = benchmark::Counter(static_cast<double>(reserved_peak), plain, binary);
    c["allocs_per_iter"] =
        benchmark::Counter(static_cast<double>(end.total_allocations - start_.total_allocations) / iterations);
    c["bytes_per_iter"] = benchmark::Counter(
        static_cast<double>(end.total_allocated_bytes - start_.total_allocated_bytes) / iterations, plain, binary);
  }

 private:
  benchmark::State* state_;
  DeviceAllocator* allocator_;
  AllocatorGauges start_;
  std::uint64_t window_ = 0;
};

}  // namespace testing
GPUMEMPROF_NAMESPACE_END
