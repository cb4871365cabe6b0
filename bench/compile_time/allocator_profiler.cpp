// Compile-time probe (bench/compile_time/measure.sh): a 50-line program that uses the allocator
// and the profiler through the light entry headers (umbrella.cpp: the same with gpumemprof.hpp).
#include <gpumemprof/allocator.hpp>
#include <gpumemprof/profiler.hpp>

#include <cstdio>
#include <vector>

namespace gmp = gpumemprof;
using namespace gmp::literals;

namespace {
void train_step(gmp::DeviceAllocator& alloc, std::vector<void*>& weights) {
  void* activations = alloc.allocate(32_MiB);
  void* gradients = alloc.allocate(8_MiB);
  alloc.deallocate(gradients);
  alloc.deallocate(activations);
  if (weights.empty()) weights.push_back(alloc.allocate(16_MiB));
}
}  // namespace

int main() {
  auto& alloc = gmp::default_allocator("sim:0");
  gmp::GPUMemoryProfiler profiler("sim:0");
  std::vector<void*> weights;
  for (int step = 0; step < 3; ++step) {
    const gmp::ProfileResult r = profiler.profile_function("train_step", train_step, alloc, weights);
    std::printf("step %d: peak %lld bytes, net %lld bytes\n", step, static_cast<long long>(r.peak_memory_usage()),
                static_cast<long long>(r.memory_diff()));
  }
  {
    auto scope = profiler.profile_context("evaluate");
    std::vector<float, gmp::Allocator<float>> v(1000, 1.0f, gmp::Allocator<float>("sim:0"));
    v.push_back(2.0f);
  }
  gmp::MemoryResource resource("sim:0");
  void* p = resource.allocate(1_MiB);
  resource.deallocate(p, 1_MiB);
  const gmp::MemoryStats stats = gmp::memory_stats("sim:0");
  std::printf("allocated %lld, reserved %lld, calls %zu\n",
              static_cast<long long>(stats.allocated_bytes.all().current),
              static_cast<long long>(stats.reserved_bytes.all().current),
              profiler.get_summary().total_function_calls);
  for (void* w : weights) alloc.deallocate(w);
  gmp::empty_cache("sim:0");
  std::printf("max allocated %lld bytes (%s)\n", static_cast<long long>(gmp::max_memory_allocated("sim:0")),
              gmp::format_size(gmp::max_memory_allocated("sim:0")).c_str());
  return gmp::memory_allocated("sim:0") == 0 ? 0 : 1;
}
