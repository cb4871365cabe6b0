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
