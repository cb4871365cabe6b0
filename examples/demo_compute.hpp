// The demo's math, behind an interface: cuBLAS on a CUDA device (demo_cuda.cpp), nothing on a
// simulated device (its pointers have no memory behind them). Matrices are row-major floats.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpumemprof_demo {

class DemoCompute {
 public:
  virtual ~DemoCompute() = default;
  /// What runs the math, in words ("cuBLAS + ReLU kernels", "none (simulated device)").
  [[nodiscard]] virtual std::string name() const = 0;
  /// True when the math really runs (losses are meaningful).
  [[nodiscard]] virtual bool computes() const = 0;
  virtual void upload(float* device, const std::vector<float>& host) = 0;
  virtual void zero(float* device, std::size_t count) = 0;
  /// C (m x n) = op(A) * op(B); op(A) is m x k, op(B) is k x n; ta/tb transpose A/B.
  virtual void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c) = 0;
  /// a = max(z, 0) (identity when the build has no kernels).
  virtual void relu(const float* z, float* a, std::size_t count) = 0;
  /// dz = da where z > 0, else 0 (identity without kernels).
  virtual void relu_backward(const float* z, const float* da, float* dz, std::size_t count) = 0;
  /// dz = 2 (z - y) / rows; returns the mean squared error (NaN when nothing is computed).
  virtual double mse(const float* z, const float* y, float* dz, int rows, int cols) = 0;
  /// v = momentum * v + g; w -= lr * v.
  virtual void sgd_momentum(float* w, float* v, const float* g, std::size_t count, float lr, float momentum) = 0;
  virtual void synchronize() = 0;
};

/// The compute of a simulated device: every operation is a no-op.
std::unique_ptr<DemoCompute> make_simulated_compute();

/// The cuBLAS compute of CUDA device `device`; throws when the build has no cuBLAS.
std::unique_ptr<DemoCompute> make_cuda_compute(int device);

}  // namespace gpumemprof_demo
