// The caching allocator on a real GPU: device memory, streams, thrust, OOM, cudaMemGetInfo.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "catch.hpp"
#include "../units.hpp"
#include "gpu_kernels.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;
using Catch::Matchers::Contains;

namespace {
gmp::DeviceAllocator make_allocator(const char* conf = "") {
  return gmp::DeviceAllocator(gmp::AnyBackend::for_device(gmp::Device("cuda:0")), gmp::AllocatorConfig(conf));
}
}  // namespace

TEST_CASE("device memory round-trips through the caching allocator") {
  auto a = make_allocator();
  auto* p = static_cast<unsigned char*>(a.allocate(3 * MiB + 5));
  REQUIRE(p != nullptr);
  std::vector<unsigned char> host(3 * MiB + 5), back(3 * MiB + 5);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 31);
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(host.data(), back.data(), host.size()) == 0);
  cudaPointerAttributes attr{};
  GPUMEMPROF_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  CHECK(attr.type == cudaMemoryTypeDevice);
  const auto st = a.memory_stats();
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(20 * MiB));
  CHECK(st.allocated_bytes.all().current == static_cast<std::int64_t>(3 * MiB + 512));
  a.validate();
  a.deallocate(p);
  a.validate();
}

TEST_CASE("record_stream: no reuse before the other stream's long-running work ends, reuse right after") {
  auto a = make_allocator();
  cudaStream_t s1 = nullptr, s2 = nullptr;
  GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  void* p = a.allocate(MiB, gmp::Stream(s1));
  gpu_test::launch_spin_and_fill(p, 1024, 300.0, s2);  // s2 uses p for ~300 ms
  a.record_stream(p, gmp::Stream(s2));
  a.deallocate(p);
  void* q = a.allocate(MiB, gmp::Stream(s1));  // s2 still running: p's block must not come back
  CHECK(q != p);
  CHECK(a.memory_stats().active.all().current == 2);
  a.validate();
  GPUMEMPROF_CUDA_CHECK(cudaStreamSynchronize(s2));
  void* r = a.allocate(MiB, gmp::Stream(s1));  // the event completed: p's block is reused at once
  CHECK(r == p);
  unsigned word = 0;
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(&word, p, sizeof word, cudaMemcpyDeviceToHost));
  CHECK(word == 0xC0FFEEu);  // the kernel finished writing before the block was reused
  a.deallocate(q);
  a.deallocate(r);
  a.validate();
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

TEST_CASE("same-stream reuse is immediate even while the stream is busy") {
  auto a = make_allocator();
  cudaStream_t s = nullptr;
  GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* p = a.allocate(MiB, gmp::Stream(s));
  gpu_test::launch_spin_and_fill(p, 256, 100.0, s);
  a.deallocate(p);
  CHECK(a.allocate(MiB, gmp::Stream(s)) == p);  // stream order protects it
  a.deallocate(p);
  GPUMEMPROF_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  a.validate();
}

TEST_CASE("thrust::device_vector with Allocator<T, thrust::device_ptr<T>>") {
  auto a = make_allocator();
  const int n = 1 << 20;
  const double sum = gpu_test::thrust_sum_of_squares(a, n);
  const double nn = n;
  CHECK(sum == Approx(nn * (nn + 1) * (2 * nn + 1) / 6).epsilon(1e-12));
  const auto st = a.memory_stats();
  CHECK(st.allocation.all().allocated >= 2);
  CHECK(st.allocation.all().current == 0);
  a.validate();
}

TEST_CASE("a real OOM, then normal use") {
  auto a = make_allocator();
  const auto info = a.mem_get_info();
  std::string message;
  try {
    (void)a.allocate(info.total + 1024 * MiB);
  } catch (const gmp::OutOfMemoryError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("CUDA out of memory") && Contains("GPU 0 has a total capacity of"));
  CHECK(a.memory_stats().num_ooms == 1);
  CHECK(cudaGetLastError() == cudaSuccess);  // the sticky error was cleared
  a.validate();
  // Fill the device with 1 GiB blocks until it refuses, then free and carry on.
  std::vector<void*> blocks;
  bool oom = false;
  while (!oom) {
    try {
      blocks.push_back(a.allocate(1024 * MiB));
    } catch (const gmp::OutOfMemoryError&) {
      oom = true;
    }
  }
  CHECK(blocks.size() > 8);
  a.validate();
  for (void* b : blocks) a.deallocate(b);
  a.empty_cache();
  void* p = a.allocate(64 * MiB);
  GPUMEMPROF_CUDA_CHECK(cudaMemset(p, 0, 64 * MiB));
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  a.deallocate(p);
  a.validate();
}

TEST_CASE("reserved bytes match cudaMemGetInfo deltas") {
  auto a = make_allocator();
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  const auto before = a.mem_get_info();
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(a.allocate(64 * MiB + static_cast<std::size_t>(i) * MiB));
  const auto during = a.mem_get_info();
  const auto reserved = static_cast<std::size_t>(a.memory_stats().reserved_bytes.all().current);
  const std::size_t used = before.free - during.free;
  INFO("reserved " << reserved << " device delta " << used);
  CHECK(used >= reserved);
  CHECK(used <= reserved + 8 * 2 * MiB);  // the driver's own 2 MiB granularity per allocation
  for (void* p : ps) a.deallocate(p);
  a.empty_cache();
  const auto after = a.mem_get_info();
  CHECK(after.free >= before.free - 2 * MiB);
  CHECK(a.memory_stats().reserved_bytes.all().current == 0);
  CHECK(gmp::device_memory_used("cuda:0") == after.total - after.free);
}

TEST_CASE("default allocator and free functions on cuda:0") {
  auto& d = gmp::default_allocator(0);
  CHECK(d.device_name() == "cuda:0");
  void* p = d.allocate(1000);
  CHECK(gmp::memory_allocated(0) == 1024);
  CHECK(gmp::memory_reserved("cuda:0") == static_cast<std::int64_t>(2 * MiB));
  d.deallocate(p);
  gmp::empty_cache(0);
  CHECK(gmp::memory_reserved(0) == 0);
  d.validate();
}
