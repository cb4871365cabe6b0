// The demo's math on a CUDA device: cuBLAS for matrix products, the loss and the optimizer;
// ReLU through demo_kernels.cu when the build compiled it (else the network stays linear).
// Built only when Meson finds CUDA with cuBLAS (GPUMEMPROF_DEMO_CUDA). cuBLAS is loaded when
// the demo first runs on a GPU, not linked: the demo lives inside the gpumemprof CLI, whose
// other commands (--version too) must not pay for loading it (~220 MB).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
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

// The cuBLAS functions the demo calls (cublas_v2.h maps cublasCreate to cublasCreate_v2 etc.).
struct Cublas {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgeam) sgeam;
  decltype(&cublasSnrm2_v2) snrm2;
  decltype(&cublasSscal_v2) sscal;
  decltype(&cublasSaxpy_v2) saxpy;
};

const Cublas& cublas() {
  static const Cublas api = [] {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      throw std::runtime_error("the demo's GPU math needs cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
                               ", which did not load (" + ::dlerror() + "); add the CUDA libraries to LD_LIBRARY_PATH "
                               "or run the demo with --device sim:0");
    }
    auto find = [&](auto& fn, const char* symbol) {
      void* p = ::dlsym(lib, symbol);
      if (p == nullptr) throw std::runtime_error(name + " has no " + symbol);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    Cublas c{};
    find(c.create, "cublasCreate_v2");
    find(c.destroy, "cublasDestroy_v2");
    find(c.sgemm, "cublasSgemm_v2");
    find(c.sgeam, "cublasSgeam");
    find(c.snrm2, "cublasSnrm2_v2");
    find(c.sscal, "cublasSscal_v2");
    find(c.saxpy, "cublasSaxpy_v2");
    return c;
  }();
  return api;
}

class CudaCompute final : public DemoCompute {
 public:
  explicit CudaCompute(int device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cublas().create(&handle_), "cublasCreate");
  }
  ~CudaCompute() override { (void)cublas().destroy(handle_); }
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
    check(cublas().sgemm(handle_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b,
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
    check(cublas().sgeam(handle_, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, &alpha, z, cols, &beta, y, cols, dz, cols),
          "cublasSgeam");
    float norm = 0.0F;
    check(cublas().snrm2(handle_, rows * cols, dz, 1, &norm), "cublasSnrm2");
    const double diff_norm = static_cast<double>(norm) * rows / 2.0;  // |z - y|
    return diff_norm * diff_norm / (static_cast<double>(rows) * cols);
  }

  void sgd_momentum(float* w, float* v, const float* g, std::size_t count, float lr, float momentum) override {
    const int n = static_cast<int>(count);
    const float one = 1.0F;
    const float minus_lr = -lr;
    check(cublas().sscal(handle_, n, &momentum, v, 1), "cublasSscal");
    check(cublas().saxpy(handle_, n, &one, g, 1, v, 1), "cublasSaxpy");
    check(cublas().saxpy(handle_, n, &minus_lr, v, 1, w, 1), "cublasSaxpy");
  }

  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

std::unique_ptr<DemoCompute> make_cuda_compute(int device) { return std::make_unique<CudaCompute>(device); }

}  // namespace gpumemprof_demo
