// The cost of tracking memory outside the allocator (track_external_memory), per call: cudaMalloc +
// cudaFree pairs made by the program before and after tracking starts, and the same pairs made by
// gpumemprof's own CUDA backend (whose calls the capture recognises and skips), then again with
// stacks recorded (track_external_memory({.stacks = true})). One process, the same request stream
// for each, best of several runs. Prints markdown table rows.
// Exit 77 without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;

namespace {

template <class Alloc, class Free>
double ns_per_pair(int pairs, std::size_t bytes, Alloc alloc, Free free) {
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; ++i) free(alloc(bytes));
    runs.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / pairs);
  }
  return *std::min_element(runs.begin(), runs.end());
}

void* runtime_alloc(std::size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) std::exit(1);
  return p;
}
void runtime_free(void* p) {
  if (cudaFree(p) != cudaSuccess) std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (gmp::cuda_device_count() == 0) {
    std::printf("no CUDA device visible (%s): skipped\n", gmp::cuda_unavailable_reason().c_str());
    return 77;
  }
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 2000;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
  gmp::CudaBackend own(0);
  const std::size_t sizes[] = {std::size_t{1} << 20, std::size_t{64} << 20};
  double off[2][2], on[2][2], stacks[2][2];
  for (int s = 0; s < 2; ++s) {
    off[s][0] = ns_per_pair(pairs, sizes[s], runtime_alloc, runtime_free);
    off[s][1] = ns_per_pair(pairs, sizes[s], [&](std::size_t n) { return own.malloc(n); }, [&](void* p) { own.free(p); });
  }
  if (!gmp::track_external_memory()) return 1;
  for (int s = 0; s < 2; ++s) {
    on[s][0] = ns_per_pair(pairs, sizes[s], runtime_alloc, runtime_free);
    on[s][1] = ns_per_pair(pairs, sizes[s], [&](std::size_t n) { return own.malloc(n); }, [&](void* p) { own.free(p); });
  }
  if (!gmp::track_external_memory({.stacks = true})) return 1;
  for (int s = 0; s < 2; ++s) {
    stacks[s][0] = ns_per_pair(pairs, sizes[s], runtime_alloc, runtime_free);
    stacks[s][1] = ns_per_pair(pairs, sizes[s], [&](std::size_t n) { return own.malloc(n); }, [&](void* p) { own.free(p); });
  }
  for (int s = 0; s < 2; ++s) {
    const std::string size = std::to_string(sizes[s] >> 20) + " MiB";
    std::printf("| %s | program's cudaMalloc+cudaFree, %s | %.0f | %.0f | %.0f | %+.0f | %+.0f |\n", prop.name,
                size.c_str(), off[s][0], on[s][0], stacks[s][0], on[s][0] - off[s][0], stacks[s][0] - on[s][0]);
    std::printf("| %s | gpumemprof's own segment malloc+free, %s | %.0f | %.0f | %.0f | %+.0f | %+.0f |\n", prop.name,
                size.c_str(), off[s][1], on[s][1], stacks[s][1], on[s][1] - off[s][1], stacks[s][1] - on[s][1]);
  }
  return 0;
}
