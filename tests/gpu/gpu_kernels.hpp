// Host-callable helpers implemented in gpu_kernels.cu (compiled by nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include "gpumemprof/allocator/default_allocator.hpp"

namespace gpu_test {
/// Keeps `stream` busy for about `milliseconds`, then fills `words` 32-bit words at `data`.
void launch_spin_and_fill(void* data, unsigned words, double milliseconds, cudaStream_t stream);
/// Sum of i^2 for i = 1..n computed with thrust::device_vector over `caching`.
double thrust_sum_of_squares(gpumemprof::DeviceAllocator& caching, int n);
}  // namespace gpu_test
