// Elementwise kernels of the demo (demo_kernels.cu, compiled by nvcc when Meson has the 'cuda'
// language). Plain C++ declarations, so demo_cuda.cpp builds with the host compiler alone.
#pragma once

#include <cstddef>

namespace gpumemprof_demo {

/// a = max(z, 0) on the current device's default stream.
void launch_relu(const float* z, float* a, std::size_t count);
/// dz = z > 0 ? da : 0.
void launch_relu_backward(const float* z, const float* da, float* dz, std::size_t count);

}  // namespace gpumemprof_demo
