// The demo's ReLU kernels (see demo_kernels.hpp). Optional: without nvcc the demo's network
// is linear and everything else runs through cuBLAS.
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "demo_kernels.hpp"

namespace gpumemprof_demo {
namespace {

__global__ void relu_kernel(const float* z, float* a, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) a[i] = z[i] > 0.0F ? z[i] : 0.0F;
}

__global__ void relu_backward_kernel(const float* z, const float* da, float* dz, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dz[i] = z[i] > 0.0F ? da[i] : 0.0F;
}

constexpr unsigned kThreads = 256;

unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void launch_relu(const float* z, float* a, std::size_t count) {
  if (count == 0) return;
  relu_kernel<<<blocks_for(count), kThreads>>>(z, a, count);
  check_launch("relu kernel");
}

void launch_relu_backward(const float* z, const float* da, float* dz, std::size_t count) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kThreads>>>(z, da, dz, count);
  check_launch("relu backward kernel");
}

}  // namespace gpumemprof_demo
