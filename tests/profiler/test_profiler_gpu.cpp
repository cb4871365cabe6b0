// The profiler on a real CUDA device (run by the GPU test runner, which skips without one):
// allocator-level results, device-level readings of memory our allocator does not own, the
// synchronize option timing asynchronous work, monitoring, and NVTX ranges.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "catch.hpp"
#include "../units.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/integrations/nvtx.hpp"
#include "gpumemprof/profiler/profiler.hpp"

namespace gmp = gpumemprof;

namespace {

/// Queues `rounds` memsets of `buffer` on the default stream: milliseconds of asynchronous work.
void queue_memsets(void* buffer, std::size_t bytes, int rounds) {
  for (int i = 0; i < rounds; ++i) REQUIRE(cudaMemsetAsync(buffer, i & 0xFF, bytes, nullptr) == cudaSuccess);
}
}  // namespace

TEST_CASE("gpu profiler: allocator-level results on cuda:0") {
  gmp::GPUMemoryProfiler profiler("cuda:0");
  CHECK(profiler.device_name() == "cuda:0");
  auto& a = gmp::default_allocator("cuda:0");
  const auto r = profiler.profile_function("alloc", [&] {
    void* p = a.allocate(256 * MiB);
    void* q = a.allocate(64 * MiB);
    a.deallocate(p);
    a.deallocate(q);
  });
  CHECK(r.memory_allocated == 320 * iMiB);
  CHECK(r.memory_freed == 320 * iMiB);
  CHECK(r.tensors_created == 2);
  CHECK(r.peak_memory_usage() - r.memory_before.allocated_memory == 320 * iMiB);
  const auto now = profiler.take_snapshot();
  REQUIRE(now.device_used_memory.has_value());
  CHECK(*now.device_used_memory >= now.reserved_memory);
  CHECK(*now.device_total_memory > 0);
}

TEST_CASE("gpu profiler: device level sees memory from plain cudaMalloc") {
  gmp::GPUMemoryProfiler profiler({.device = "cuda:0", .level = gmp::ProfileLevel::device});
  void* raw = nullptr;
  const auto r =
      profiler.profile_function("raw_cudaMalloc", [&] { REQUIRE(cudaMalloc(&raw, 512 * MiB) == cudaSuccess); });
  CHECK_FALSE(r.allocator_level);
  CHECK(r.memory_diff() >= 500 * iMiB);  // the driver may round up
  CHECK(r.peak_memory_usage() >= r.memory_after.device_used_memory.value_or(0));
  REQUIRE(cudaFree(raw) == cudaSuccess);
  CHECK(gmp::format_summary(profiler.get_summary()).find("n/a") != std::string::npos);
}

TEST_CASE("gpu profiler: synchronize makes execution_time cover asynchronous work") {
  void* buffer = nullptr;
  constexpr std::size_t bytes = 1024 * MiB;
  REQUIRE(cudaMalloc(&buffer, bytes) == cudaSuccess);
  queue_memsets(buffer, bytes, 2);  // warm up
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

  // How long 40 memsets of 1 GiB take when waited for.
  const auto t0 = std::chrono::steady_clock::now();
  queue_memsets(buffer, bytes, 40);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const double work = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  gmp::GPUMemoryProfiler synced({.device = "cuda:0", .synchronize = true});
  gmp::GPUMemoryProfiler unsynced({.device = "cuda:0", .synchronize = false});
  const double with_sync = synced.profile_function("memsets", [&] { queue_memsets(buffer, bytes, 40); }).execution_time;
  const double without = unsynced.profile_function("memsets", [&] { queue_memsets(buffer, bytes, 40); }).execution_time;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  INFO("work " << work << " s, synchronized scope " << with_sync << " s, unsynchronized " << without << " s");
  CHECK(with_sync >= 0.8 * work);
  CHECK(without < 0.5 * work);
  REQUIRE(cudaFree(buffer) == cudaSuccess);
}

TEST_CASE("gpu profiler: monitoring and NVTX ranges on a real device") {
  CHECK(gmp::nvtx_scope_ranges_enabled() == gmp::nvtx_available);
  gmp::GPUMemoryProfiler profiler("cuda:0");
  profiler.start_monitoring(std::chrono::milliseconds(1));
  {
    auto scope = profiler.profile_context("nvtx_scope");
    auto& a = gmp::default_allocator("cuda:0");
    a.deallocate(a.allocate(8 * MiB));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (profiler.snapshots().size() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  profiler.stop_monitoring();
  REQUIRE(profiler.snapshots().size() >= 3);
  CHECK(profiler.snapshots().back().device_used_memory.has_value());
  CHECK(profiler.monitoring_error().empty());
  CHECK(profiler.results().size() == 1);
}
