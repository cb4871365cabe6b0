// Layer 1: the CUDA runtime backend -- the only file of the library that includes CUDA headers.
//
// Every runtime call goes through GPUMEMPROF_CUDA_CHECK, which adds file and line and clears
// CUDA's sticky error state. Out-of-memory from cudaMalloc is not an error here: malloc returns
// nullptr (error cleared) and the allocator runs its OOM sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

#if GPUMEMPROF_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

GPUMEMPROF_NAMESPACE_BEGIN

#if GPUMEMPROF_WITH_CUDA

namespace detail {
[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  (void)cudaGetLastError();  // clear the sticky error so later calls are not blamed for it
  throw DeviceRuntimeError(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                           ") in " + what + " at " + file + ":" + std::to_string(line));
}
}  // namespace detail

#define GPUMEMPROF_CUDA_CHECK(expr)                                          \
  do {                                                                       \
    const cudaError_t gmp_err_ = (expr);                                     \
    if (gmp_err_ != cudaSuccess) {                                           \
      ::gpumemprof::detail::throw_cuda(gmp_err_, #expr, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)

/// Number of visible CUDA devices; 0 when there is no driver or no device.
[[nodiscard]] inline int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// Why no CUDA device is usable, in words (empty when devices are visible).
[[nodiscard]] inline std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("the CUDA runtime reports ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  }
  return n == 0 ? "no CUDA device is visible" : "";
}

/// The calling thread's current CUDA device.
[[nodiscard]] inline int cuda_current_device() {
  int d = 0;
  GPUMEMPROF_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

/// Makes `device` current for a scope and restores the previous device after.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    GPUMEMPROF_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) GPUMEMPROF_CUDA_CHECK(cudaSetDevice(device));
  }
  ~CudaDeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// Device memory of one CUDA device through cudaMalloc/cudaFree, with a pool of reusable
/// timing-free events for cross-stream frees.
class CudaBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  CudaBackend(CudaBackend&& other) noexcept : device_(other.device_), free_events_(std::move(other.free_events_)) {}
  CudaBackend& operator=(CudaBackend&&) = delete;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() {
    for (auto* e : free_events_) (void)cudaEventDestroy(e);
  }

  [[nodiscard]] void* malloc(std::size_t bytes) {
    CudaDeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // forgive: the allocator will free cache and retry
      return nullptr;
    }
    GPUMEMPROF_CUDA_CHECK(err);
    return p;
  }

  void free(void* ptr) {
    CudaDeviceGuard guard(device_);
    GPUMEMPROF_CUDA_CHECK(cudaFree(ptr));
  }

  [[nodiscard]] MemInfo mem_get_info() const {
    CudaDeviceGuard guard(device_);
    MemInfo info;
    GPUMEMPROF_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
    return info;
  }

  [[nodiscard]] Event record_event(Stream stream) {
    CudaDeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (!free_events_.empty()) {
        e = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (e == nullptr) GPUMEMPROF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    GPUMEMPROF_CUDA_CHECK(cudaEventRecord(e, stream.as<CUstream_st>()));
    return Event{reinterpret_cast<std::uintptr_t>(e)};
  }

  [[nodiscard]] bool query_event(Event ev) {
    const cudaError_t err = cudaEventQuery(to_cuda(ev));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    GPUMEMPROF_CUDA_CHECK(err);
    return true;
  }

  void synchronize_event(Event ev) { GPUMEMPROF_CUDA_CHECK(cudaEventSynchronize(to_cuda(ev))); }

  void release_event(Event ev) {
    std::lock_guard lock(mutex_);
    free_events_.push_back(to_cuda(ev));
  }

  [[nodiscard]] int index() const noexcept { return device_; }
  [[nodiscard]] std::string name() const { return "cuda:" + std::to_string(device_); }

 private:
  static cudaEvent_t to_cuda(Event e) noexcept { return reinterpret_cast<cudaEvent_t>(e.id); }

  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_events_;
};

static_assert(DeviceBackend<CudaBackend>);

/// Waits until all work queued on CUDA device `device` has completed (cudaDeviceSynchronize),
/// so that a clock read afterwards includes asynchronous kernels. Used by the profiler.
inline void cuda_synchronize(int device) {
  CudaDeviceGuard guard(device);
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
}

#else  // !GPUMEMPROF_WITH_CUDA

[[nodiscard]] inline int cuda_device_count() noexcept { return 0; }
[[nodiscard]] inline std::string cuda_unavailable_reason() {
  return "gpumemprof was built without CUDA (GPUMEMPROF_WITH_CUDA=0)";
}

#endif

GPUMEMPROF_NAMESPACE_END
