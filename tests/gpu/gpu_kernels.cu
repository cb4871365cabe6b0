// Device code for the GPU tests, kept free of Catch2 so nvcc compiles only what needs it.
#include <thrust/device_ptr.h>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include "gpu_kernels.hpp"
#include "gpumemprof/allocator/std_allocator.hpp"

namespace {
__global__ void spin_and_fill(unsigned* data, unsigned n, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) data[i] = 0xC0FFEEu;
}

struct Square {
  __host__ __device__ double operator()(double x) const { return x * x; }
};
}  // namespace

void gpu_test::launch_spin_and_fill(void* data, unsigned words, double milliseconds, cudaStream_t stream) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  if (khz <= 0) khz = 1500000;
  const auto cycles = static_cast<long long>(milliseconds * khz);
  spin_and_fill<<<1, 256, 0, stream>>>(static_cast<unsigned*>(data), words, cycles);
}

double gpu_test::thrust_sum_of_squares(gpumemprof::DeviceAllocator& caching, int n) {
  using Alloc = gpumemprof::Allocator<double, thrust::device_ptr<double>>;
  thrust::device_vector<double, Alloc> v(static_cast<std::size_t>(n), 0.0, Alloc(caching));
  thrust::sequence(v.begin(), v.end(), 1.0);
  thrust::device_vector<double, Alloc> sq(static_cast<std::size_t>(n), 0.0, Alloc(caching));
  thrust::transform(v.begin(), v.end(), sq.begin(), Square{});
  return thrust::reduce(sq.begin(), sq.end(), 0.0);
}

namespace {
__device__ unsigned pattern(unsigned seed, std::size_t i) {
  auto x = static_cast<unsigned>(i * 2654435761u) ^ seed;
  x ^= x >> 15;
  return x * 2246822519u;
}
__global__ void fill_kernel(unsigned* data, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] = pattern(seed, i);
  }
}
__global__ void check_kernel(const unsigned* data, std::size_t n, unsigned seed, unsigned long long* bad) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    if (data[i] != pattern(seed, i)) atomicAdd(bad, 1ull);
  }
}
}  // namespace

void gpu_test::fill_pattern(void* data, std::size_t words, unsigned seed, cudaStream_t stream) {
  fill_kernel<<<256, 256, 0, stream>>>(static_cast<unsigned*>(data), words, seed);
}

std::size_t gpu_test::count_mismatches(const void* data, std::size_t words, unsigned seed, cudaStream_t stream) {
  unsigned long long* bad = nullptr;
  cudaMallocAsync(&bad, sizeof *bad, stream);
  cudaMemsetAsync(bad, 0, sizeof *bad, stream);
  check_kernel<<<256, 256, 0, stream>>>(static_cast<const unsigned*>(data), words, seed, bad);
  unsigned long long host = 0;
  cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(bad, stream);
  cudaStreamSynchronize(stream);
  return cudaGetLastError() == cudaSuccess ? static_cast<std::size_t>(host) : ~std::size_t{0};
}
