// A random gather over a 2 GiB tensor (out[i] = src[index[i]], 64 Mi indices) with `src` from
// cudaMalloc and from gpumemprof's caching allocator under expandable_segments:True (20 MiB
// physical allocations, as c10's) and compacting_expandable_segments:True (2 MiB ones): does the
// physical layout of expandable segments change what kernels pay (TLB reach)? Rounds interleave
// the contenders; each time is the median of the round's repetitions (CUDA events). Prints one
// line per contender and round, then the medians over rounds and the ratios to cudaMalloc.
// Built and run by bench/gpu_pages.sh; usage: gpu_pages_gather [ROUNDS] [REPS].
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;

void gather_launch(const float* src, const std::uint32_t* index, float* out, std::size_t n, cudaStream_t s);
void fill_index_launch(std::uint32_t* index, std::size_t n, std::uint32_t range, cudaStream_t s);
void fill_src_launch(float* src, std::size_t n, cudaStream_t s);

namespace {
constexpr std::size_t kSrcBytes = std::size_t{2} << 30;
constexpr std::size_t kSrc = kSrcBytes / sizeof(float);
constexpr std::size_t kIndices = std::size_t{64} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds per gather (median of `reps`) with `src` as the tensor.
double time_gather(float* src, const std::uint32_t* index, float* out, int reps) {
  fill_src_launch(src, kSrc, nullptr);
  gather_launch(src, index, out, kIndices, nullptr);  // warm-up
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a = nullptr, b = nullptr;
  GPUMEMPROF_CUDA_CHECK(cudaEventCreate(&a));
  GPUMEMPROF_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    GPUMEMPROF_CUDA_CHECK(cudaEventRecord(a, nullptr));
    gather_launch(src, index, out, kIndices, nullptr);
    GPUMEMPROF_CUDA_CHECK(cudaEventRecord(b, nullptr));
    GPUMEMPROF_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    GPUMEMPROF_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  GPUMEMPROF_CUDA_CHECK(cudaGetLastError());
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  // The gather read what fill_src wrote: src[i] = i & 0xFFFF (a wrong mapping would not).
  std::vector<std::uint32_t> idx(4096);
  std::vector<float> got(idx.size());
  const std::size_t at = kIndices - idx.size();  // the last indices: the whole tensor was mapped
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(idx.data(), index + at, idx.size() * sizeof(idx[0]), cudaMemcpyDeviceToHost));
  GPUMEMPROF_CUDA_CHECK(cudaMemcpy(got.data(), out + at, got.size() * sizeof(got[0]), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (got[i] != static_cast<float>(idx[i] & 0xFFFF)) {
      std::printf("gpu_pages_gather: wrong value at index %zu: %g, want %u\n", at + i, static_cast<double>(got[i]),
                  idx[i] & 0xFFFF);
      std::exit(1);
    }
  }
  return median(ms);
}
}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  if (gmp::cuda_device_count() == 0) {
    std::printf("gpu_pages_gather: %s\n", gmp::cuda_unavailable_reason().c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  GPUMEMPROF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; src %zu MiB, %zu Mi indices (uint32), %d rounds of %d gathers\n", prop.name, kSrcBytes >> 20,
              kIndices >> 20, rounds, reps);
  std::uint32_t* index = nullptr;
  float* out = nullptr;
  GPUMEMPROF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&index), kIndices * sizeof(std::uint32_t)));
  GPUMEMPROF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), kIndices * sizeof(float)));
  fill_index_launch(index, kIndices, static_cast<std::uint32_t>(kSrc), nullptr);
  std::map<std::string, std::vector<double>> times;
  const std::vector<std::string> contenders = {"cudaMalloc", "expandable_segments:True",
                                               "compacting_expandable_segments:True"};
  for (int round = 1; round <= rounds; ++round) {
    for (const std::string& c : contenders) {
      double ms = 0;
      std::string layout;
      if (c == "cudaMalloc") {
        float* src = nullptr;
        GPUMEMPROF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&src), kSrcBytes));
        ms = time_gather(src, index, out, reps);
        GPUMEMPROF_CUDA_CHECK(cudaFree(src));
      } else {
        gmp::CachingAllocator<gmp::CudaBackend> a(gmp::CudaBackend(0), gmp::AllocatorConfig(c));
        auto* src = static_cast<float*>(a.allocate(kSrcBytes));
        ms = time_gather(src, index, out, reps);
        const auto calls = a.backend().vmm_calls();
        layout = " (" + std::to_string(calls.creates) + " physical allocations of " +
                 std::to_string((a.memory_stats().reserved_bytes.all().current >> 20) /
                                static_cast<std::int64_t>(std::max<std::size_t>(calls.creates, 1))) +
                 " MiB, " + std::to_string(calls.maps) + " cuMemMap)";
        a.deallocate(src);
        a.empty_cache();
      }
      times[c].push_back(ms);
      std::printf("round %d %-38s %8.3f ms/gather  %6.2f ns/index%s\n", round, c.c_str(), ms,
                  ms * 1e6 / static_cast<double>(kIndices), layout.c_str());
    }
  }
  const double base = median(times["cudaMalloc"]);
  for (const std::string& c : contenders) {
    const double m = median(times[c]);
    std::printf("median %-38s %8.3f ms/gather  x%.3f of cudaMalloc\n", c.c_str(), m, m / base);
  }
  GPUMEMPROF_CUDA_CHECK(cudaFree(index));
  GPUMEMPROF_CUDA_CHECK(cudaFree(out));
  return 0;
}
