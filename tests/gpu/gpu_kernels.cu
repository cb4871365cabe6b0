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

__device__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
__device__ unsigned pattern(unsigned tag, unsigned i) { return (tag * 2654435761u) ^ (i * 40503u + 0x9E3779B9u); }

__global__ void fill_pattern_kernel(unsigned* data, unsigned n, unsigned tag, long long cycles) {
  if (threadIdx.x == 0 && blockIdx.x == 0) spin(cycles);
  __syncthreads();
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) data[i] = pattern(tag, i);
}

// One block: the spin happens before any word is read (a grid would race its own spin).
__global__ void verify_pattern_kernel(const unsigned* data, unsigned n, unsigned tag, long long cycles, unsigned* errors) {
  if (threadIdx.x == 0) spin(cycles);
  __syncthreads();
  unsigned bad = 0;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) bad += data[i] != pattern(tag, i) ? 1u : 0u;
  if (bad != 0) atomicAdd(errors, bad);
}

long long cycles_for(double milliseconds) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  if (khz <= 0) khz = 1500000;
  return static_cast<long long>(milliseconds * khz);
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

void gpu_test::launch_fill_pattern(void* data, unsigned words, unsigned tag, double spin_ms, cudaStream_t stream) {
  const unsigned blocks = words / 256 + 1 < 128 ? words / 256 + 1 : 128;
  fill_pattern_kernel<<<blocks, 256, 0, stream>>>(static_cast<unsigned*>(data), words, tag, cycles_for(spin_ms));
}

void gpu_test::launch_verify_pattern(const void* data, unsigned words, unsigned tag, double spin_ms, unsigned* errors,
                                     cudaStream_t stream) {
  verify_pattern_kernel<<<1, 1024, 0, stream>>>(static_cast<const unsigned*>(data), words, tag, cycles_for(spin_ms), errors);
}

void gpu_test::fill_pattern(void* data, std::size_t words, unsigned seed, cudaStream_t stream) {
  launch_fill_pattern(data, static_cast<unsigned>(words), seed, 0.0, stream);
}

std::size_t gpu_test::count_mismatches(const void* data, std::size_t words, unsigned seed, cudaStream_t stream) {
  unsigned* bad = nullptr;
  cudaMallocAsync(&bad, sizeof *bad, stream);
  cudaMemsetAsync(bad, 0, sizeof *bad, stream);
  launch_verify_pattern(data, static_cast<unsigned>(words), seed, 0.0, bad, stream);
  unsigned host = 0;
  cudaMemcpyAsync(&host, bad, sizeof host, cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(bad, stream);
  cudaStreamSynchronize(stream);
  return cudaGetLastError() == cudaSuccess ? host : ~std::size_t{0};
}
