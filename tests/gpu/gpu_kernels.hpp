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

namespace gpu_test {
/// Writes word i of `data` as hash(seed, i) for i < words, on `stream`.
void fill_pattern(void* data, std::size_t words, unsigned seed, cudaStream_t stream);
/// Words of `data` that differ from fill_pattern's (synchronizes `stream`).
std::size_t count_mismatches(const void* data, std::size_t words, unsigned seed, cudaStream_t stream);
}  // namespace gpu_test
