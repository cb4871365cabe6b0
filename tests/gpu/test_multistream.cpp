// Multi-stream stress on a real GPU: blocks filled with a pattern on one stream are verified on
// another after record_stream and an immediate free, while new allocations keep refilling memory
// on the producer streams. Reuse of a block before its consumer stream finished overwrites the
// pattern under the verifying kernel and shows up as mismatched words. A control run without
// record_stream shows the detector sees such early reuse.
#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "catch.hpp"
#include "../units.hpp"
#include "gpu_kernels.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;

namespace {

struct Streams {
  explicit Streams(int n) : s(static_cast<std::size_t>(n)) {
    for (auto& x : s) GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  }
  ~Streams() {
    for (auto& x : s) cudaStreamDestroy(x);
  }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;
  std::vector<cudaStream_t> s;
};

/// Runs `iterations` produce/consume rounds; returns the mismatched words the consumers saw.
unsigned run_rounds(gmp::DeviceAllocator& a, int iterations, bool record, unsigned seed) {
  Streams producers(4), consumers(3);
  void* raw_errors = nullptr;  // outside the allocator under test
  GPUMEMPROF_CUDA_CHECK(cudaMalloc(&raw_errors, sizeof(unsigned)));
  auto* errors = static_cast<unsigned*>(raw_errors);
  GPUMEMPROF_CUDA_CHECK(cudaMemset(errors, 0, sizeof(unsigned)));
  std::mt19937 rng(seed);
  for (int i = 0; i < iterations; ++i) {
    cudaStream_t prod = producers.s[rng() % producers.s.size()];
    cudaStream_t cons = consumers.s[rng() % consumers.s.size()];
    // Both pools: 4 KiB .. 1 MiB small, up to 12 MiB large, odd sizes included.
    const std::size_t bytes = rng() % 4 == 0 ? MiB + rng() % (11 * MiB) : 4 * KiB + rng() % MiB;
    const auto words = static_cast<unsigned>(bytes / sizeof(unsigned));
    const unsigned tag = static_cast<unsigned>(i) * 7919u + seed;
    void* p = a.allocate(bytes, gmp::Stream(prod));
    gpu_test::launch_fill_pattern(p, words, tag, 0.0, prod);
    cudaEvent_t filled = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    GPUMEMPROF_CUDA_CHECK(cudaEventRecord(filled, prod));
    GPUMEMPROF_CUDA_CHECK(cudaStreamWaitEvent(cons, filled, 0));
    GPUMEMPROF_CUDA_CHECK(cudaEventDestroy(filled));
    // The consumer waits a little before reading: time for a wrongly reused block to be refilled.
    gpu_test::launch_verify_pattern(p, words, tag, 0.5 + (rng() % 100) / 100.0, errors, cons);
    if (record) a.record_stream(p, gmp::Stream(cons));
    a.deallocate(p);  // at once: the consumer has not run yet
    if (i % 97 == 0) a.validate();
    if (i % 211 == 0) a.empty_cache();
  }
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned host_errors = 0;
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(&host_errors, errors, sizeof host_errors, cudaMemcpyDeviceToHost));
  cudaFree(errors);
  return host_errors;
}
}  // namespace

TEST_CASE("multi-stream stress: with record_stream no block is reused before its consumer stream is done") {
  for (const char* conf :
       {"", "max_split_size_mb:20", "roundup_power2_divisions:4", "release_lock_on_cudamalloc:True"}) {
    INFO("config '" << conf << "'");
    gmp::DeviceAllocator a(gmp::AnyBackend::for_device(gmp::Device("cuda:0")), gmp::AllocatorConfig(conf));
    CHECK(run_rounds(a, 1500, /*record=*/true, 11) == 0);
    a.validate();
    CHECK(a.memory_stats().allocation.all().current == 0);
    // Blocks whose consumer events completed stay active until the allocator next looks at its
    // events (the next allocate or empty_cache), as in PyTorch.
    a.empty_cache();
    const auto st = a.memory_stats();
    CHECK(st.active_bytes.all().current == 0);
    CHECK(st.reserved_bytes.all().current == 0);
  }
}

TEST_CASE("multi-stream stress control: without record_stream the verifier sees early reuse") {
  gmp::DeviceAllocator a(gmp::AnyBackend::for_device(gmp::Device("cuda:0")), gmp::AllocatorConfig(""));
  // The detector must be able to fail: freeing without record_stream is the user error that
  // record_stream exists for, and refilled blocks show up as mismatches.
  CHECK(run_rounds(a, 300, /*record=*/false, 5) > 0);
  a.validate();
}
