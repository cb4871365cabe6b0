// The kernels of bench/gpu_pages_gather.cpp (compiled by nvcc; the host part includes gpumemprof's
// headers and is compiled by the C++ compiler): a random gather out[i] = src[index[i]] and the
// fills that set up its inputs.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace {
__global__ void gather(const float* src, const std::uint32_t* index, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = src[index[i]];
  }
}
__global__ void fill_index(std::uint32_t* index, std::size_t n, std::uint32_t range, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;  // splitmix64: uniform over the range
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    index[i] = static_cast<std::uint32_t>((x ^ (x >> 31)) % range);
  }
}
__global__ void fill_src(float* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    src[i] = static_cast<float>(i & 0xFFFF);
  }
}
constexpr int kBlocks = 4096, kThreads = 256;
}  // namespace

void gather_launch(const float* src, const std::uint32_t* index, float* out, std::size_t n, cudaStream_t s) {
  gather<<<kBlocks, kThreads, 0, s>>>(src, index, out, n);
}
void fill_index_launch(std::uint32_t* index, std::size_t n, std::uint32_t range, cudaStream_t s) {
  fill_index<<<kBlocks, kThreads, 0, s>>>(index, n, range, 12345u);
}
void fill_src_launch(float* src, std::size_t n, cudaStream_t s) { fill_src<<<kBlocks, kThreads, 0, s>>>(src, n); }
