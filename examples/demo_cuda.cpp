// The demo's math on a CUDA device: cuBLAS for matrix products, the loss and the optimizer;
// ReLU through demo_kernels.cu when the build compiled it (else the network stays linear).
// Built only when Meson finds CUDA with cuBLAS (GPUMEMPROF_DEMO_CUDA).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "demo_compute.hpp"
#if GPUMEMPROF_DEMO_KERNELS
#include "demo_kernels.hpp"
#endif

namespace gpumemprof_demo {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
  }
}

class CudaCompute final : public DemoCompute {
 public:
  explicit CudaCompute(int device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cublasCreate(&handle_), "cublasCreate");
  }
  ~CudaCompute() override { (void)cublasDestroy(handle_); }
  CudaCompute(const CudaCompute&) = delete;
  CudaCompute& operator=(const CudaCompute&) = delete;

  [[nodiscard]] std::string name() const override {
#if GPUMEMPROF_DEMO_KERNELS
    return "cuBLAS + ReLU kernels";
#else
    return "cuBLAS (no kernels built: linear layers)";
#endif
  }
  [[nodiscard]] bool computes() const override { return true; }

  void upload(float* device, const std::vector<float>& host) override {
    check(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  }
  void zero(float* device, std::size_t count) override {
    check(cudaMemset(device, 0, count * sizeof(float)), "cudaMemset");
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c) override {
    const float one = 1.0F;
    const float zero_f = 0.0F;
    check(cublasSgemm(handle_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b,
                      tb ? k : n, a, ta ? m : k, &zero_f, c, n),
          "cublasSgemm");
  }

  void relu(const float* z, float* a, std::size_t count) override {
#if GPUMEMPROF_DEMO_KERNELS
    launch_relu(z, a, count);
#else
    check(cudaMemcpy(a, z, count * sizeof(float), cudaMemcpyDeviceToDevice), "relu (copy)");
#endif
  }
  void relu_backward(const float* z, const float* da, float* dz, std::size_t count) override {
#if GPUMEMPROF_DEMO_KERNELS
    launch_relu_backward(z, da, dz, count);
#else
    (void)z;
    check(cudaMemcpy(dz, da, count * sizeof(float), cudaMemcpyDeviceToDevice), "relu backward (copy)");
#endif
  }

  double mse(const float* z, const float* y, float* dz, int rows, int cols) override {
    // dz = 2/rows * z - 2/rows * y, elementwise (geam over a cols x rows column-major view).
    const float alpha = 2.0F / static_cast<float>(rows);
    const float beta = -alpha;
    check(cublasSgeam(handle_, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, &alpha, z, cols, &beta, y, cols, dz, cols),
          "cublasSgeam");
    float norm = 0.0F;
    check(cublasSnrm2(handle_, rows * cols, dz, 1, &norm), "cublasSnrm2");
    const double diff_norm = static_cast<double>(norm) * rows / 2.0;  // |z - y|
    return diff_norm * diff_norm / (static_cast<double>(rows) * cols);
  }

  void sgd_momentum(float* w, float* v, const float* g, std::size_t count, float lr, float momentum) override {
    const int n = static_cast<int>(count);
    const float one = 1.0F;
    const float minus_lr = -lr;
    check(cublasSscal(handle_, n, &momentum, v, 1), "cublasSscal");
    check(cublasSaxpy(handle_, n, &one, g, 1, v, 1), "cublasSaxpy");
    check(cublasSaxpy(handle_, n, &minus_lr, v, 1, w, 1), "cublasSaxpy");
  }

  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

std::unique_ptr<DemoCompute> make_cuda_compute(int device) { return std::make_unique<CudaCompute>(device); }

}  // namespace gpumemprof_demo
