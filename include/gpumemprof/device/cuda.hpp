// Layer 1: the CUDA runtime backend -- the only file of the library that includes CUDA headers.
//
// Every runtime call goes through GPUMEMPROF_CUDA_CHECK, which adds file and line and clears
// CUDA's sticky error state. Out-of-memory from cudaMalloc is not an error here: malloc returns
// nullptr (error cleared) and the allocator runs its OOM sequence.
//
// Expandable segments use the driver's virtual memory API (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree). Its entry points come
// from the runtime (cudaGetDriverEntryPointByVersion), as PyTorch does, so nothing links
// libcuda: the library builds where only the toolkit's stub exists and runs on any driver.
// As in c10's ExpandableSegment, each page of a reservation (its `page`: 20 MiB in PyTorch's large
// pool, 2 MiB in its small pool and in the compacting policy's) is one physical allocation, made
// with one cuMemCreate and mapped with one cuMemMap; unmapping a page releases it (cuMemUnmap,
// cuMemRelease). Nothing is kept for later: the device gets the memory back at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/error.hpp"

#if GPUMEMPROF_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
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

namespace detail {

/// Driver function `name` (as of the CUDA 12.0 ABI) through the runtime, into `f`; false when the
/// driver lacks it. Nothing links libcuda: the library runs on any driver.
template <class F>
bool driver_entry(F& f, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  f = reinterpret_cast<F>(p);
  return true;
}

/// The driver's virtual memory functions, looked up once through the runtime.
struct CudaVmmApi {
  CUresult (*address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, std::size_t, const CUmemAccessDesc*, std::size_t) = nullptr;
  CUresult (*granularity)(std::size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*error_name)(CUresult, const char**) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  bool ok = false;

  /// The functions, or an object with ok == false when the driver lacks them.
  static const CudaVmmApi& get() {
    static const CudaVmmApi api = load();
    return api;
  }

 private:
  template <class F>
  static bool entry(F& f, const char* name) {
    return driver_entry(f, name);
  }
  static CudaVmmApi load() {
    CudaVmmApi a;
    a.ok = entry(a.address_reserve, "cuMemAddressReserve") && entry(a.address_free, "cuMemAddressFree") &&
           entry(a.create, "cuMemCreate") && entry(a.release, "cuMemRelease") && entry(a.map, "cuMemMap") &&
           entry(a.unmap, "cuMemUnmap") && entry(a.set_access, "cuMemSetAccess") &&
           entry(a.granularity, "cuMemGetAllocationGranularity") && entry(a.error_name, "cuGetErrorName") &&
           entry(a.device_get, "cuDeviceGet") && entry(a.device_attribute, "cuDeviceGetAttribute");
    return a;
  }
};

[[noreturn]] inline void throw_cu(CUresult err, const char* what, const char* file, int line) {
  const char* name = "unknown";
  if (CudaVmmApi::get().error_name != nullptr) (void)CudaVmmApi::get().error_name(err, &name);
  throw DeviceRuntimeError(std::string("CUDA driver error ") + name + " (" + std::to_string(static_cast<int>(err)) +
                           ") in " + what + " at " + file + ":" + std::to_string(line));
}

}  // namespace detail

#define GPUMEMPROF_CU_CHECK(expr)                                             \
  do {                                                                        \
    const CUresult gmp_cu_err_ = (expr);                                      \
    if (gmp_cu_err_ != CUDA_SUCCESS) {                                        \
      ::gpumemprof::detail::throw_cu(gmp_cu_err_, #expr, __FILE__, __LINE__); \
    }                                                                         \
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
    // The runtime says "driver version is insufficient" when there is no driver at all: say
    // what is true on such a machine.
    if (err == cudaErrorInsufficientDriver) {
      void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (driver == nullptr) return "no GPU: no NVIDIA driver on this machine (libcuda.so.1 not found)";
      ::dlclose(driver);
    }
    if (err == cudaErrorNoDevice) return "no GPU: the NVIDIA driver sees no device";
    return std::string("the CUDA runtime reports ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  }
  return n == 0 ? "no GPU: no CUDA device is visible" : "";
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
  CudaBackend(CudaBackend&& other) noexcept
      : device_(other.device_),
        free_events_(std::move(other.free_events_)),
        sizes_(std::move(other.sizes_)),
        page_(other.page_),
        pages_(std::move(other.pages_)),
        vmm_calls_(other.vmm_calls_) {}
  CudaBackend& operator=(CudaBackend&&) = delete;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() {
    for (auto* e : free_events_) (void)cudaEventDestroy(e);
  }

  [[nodiscard]] void* malloc(std::size_t bytes) {
    CudaDeviceGuard guard(device_);
    const OwnDeviceCalls own;  // the external-memory capture skips these calls
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // forgive: the allocator will free cache and retry
      return nullptr;
    }
    GPUMEMPROF_CUDA_CHECK(err);
    {
      std::lock_guard lock(mutex_);
      sizes_.emplace(p, bytes);
    }
    detail::cuda_own_bytes(device_) += bytes;
    return p;
  }

  void free(void* ptr) {
    CudaDeviceGuard guard(device_);
    const OwnDeviceCalls own;
    GPUMEMPROF_CUDA_CHECK(cudaFree(ptr));
    std::lock_guard lock(mutex_);
    if (auto it = sizes_.find(ptr); it != sizes_.end()) {
      detail::cuda_own_bytes(device_) -= it->second;
      sizes_.erase(it);
    }
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

  // --- CaptureAwareBackend (CUDA graphs) --------------------------------------------------------
  /// Whether `stream` is capturing now (cudaStreamIsCapturing, which capture itself allows). An
  /// invalidated capture counts as capturing: nothing capture forbids may run on it either.
  /// A stream the user already destroyed (cached memory may still name it) answers with an
  /// error: it is not capturing, and the error is cleared so that it reaches no later call.
  [[nodiscard]] bool is_capturing(Stream stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream.as<CUstream_st>(), &status) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return status != cudaStreamCaptureStatusNone;
  }
  /// This thread's capture mode, exchanged (cudaThreadExchangeStreamCaptureMode).
  CaptureMode exchange_capture_mode(CaptureMode mode) {
    auto m = static_cast<cudaStreamCaptureMode>(static_cast<int>(mode));
    GPUMEMPROF_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m));
    return static_cast<CaptureMode>(static_cast<int>(m));
  }

  // --- VirtualMemoryBackend (expandable segments) ----------------------------------------------
  /// Whether the driver and the device support virtual memory management.
  [[nodiscard]] bool supports_virtual_memory() const {
    const auto& api = detail::CudaVmmApi::get();
    if (!api.ok) return false;
    CUdevice dev{};
    int v = 0;
    return api.device_get(&dev, device_) == CUDA_SUCCESS &&
           api.device_attribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS &&
           v != 0;
  }

  /// The driver's minimum mapping granularity for this device (bytes); 0 without VMM support.
  [[nodiscard]] std::size_t granularity() const {
    std::lock_guard lock(mutex_);
    if (page_ == 0 && supports_virtual_memory()) {
      const CUmemAllocationProp prop = allocation_prop();
      GPUMEMPROF_CU_CHECK(detail::CudaVmmApi::get().granularity(&page_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    }
    return page_;
  }

  /// Address space for `bytes` (rounded up to whole pages) whose physical allocations will be
  /// `page` bytes each, a multiple of granularity(); size 0 when the driver has no room.
  [[nodiscard]] Reservation reserve(std::size_t bytes, std::size_t page) {
    const std::size_t g = granularity();
    if (g == 0) return {};
    if (page == 0 || page % g != 0) {
      throw DeviceRuntimeError(name() + ": a page of " + std::to_string(page) +
                               " bytes is not a multiple of the mapping granularity (" + std::to_string(g) + ")");
    }
    CudaDeviceGuard guard(device_);
    GPUMEMPROF_CUDA_CHECK(cudaFree(nullptr));  // the primary context exists before driver calls
    const std::size_t size = (bytes + page - 1) / page * page;
    CUdeviceptr base = 0;
    if (detail::CudaVmmApi::get().address_reserve(&base, size, g, 0, 0) != CUDA_SUCCESS) return {};
    std::lock_guard lock(mutex_);
    pages_.emplace(static_cast<std::uintptr_t>(base), std::vector<CUmemGenericAllocationHandle>(size / page, 0));
    return {static_cast<std::uintptr_t>(base), size, page};
  }

  void release(Reservation r) {
    {
      std::lock_guard lock(mutex_);
      pages_.erase(r.base);
    }
    CudaDeviceGuard guard(device_);
    GPUMEMPROF_CU_CHECK(detail::CudaVmmApi::get().address_free(static_cast<CUdeviceptr>(r.base), r.size));
  }

  /// Backs [offset, offset + bytes) of `r` with new physical pages of r.page bytes, readable and
  /// writable by this device: one cuMemCreate and one cuMemMap per page, then one cuMemSetAccess
  /// for the range. False (nothing mapped, nothing held) when the device is out of memory.
  [[nodiscard]] bool map(Reservation r, std::size_t offset, std::size_t bytes) {
    const auto& api = detail::CudaVmmApi::get();
    CudaDeviceGuard guard(device_);
    const OwnDeviceCalls own;
    const CUmemAllocationProp prop = allocation_prop();
    std::lock_guard lock(mutex_);
    auto& handles = pages_of(r, offset, bytes);
    const std::size_t first = offset / r.page;
    const std::size_t count = bytes / r.page;
    // Every page first, as c10 does: out of memory, the ones made go back and nothing is mapped.
    for (std::size_t i = 0; i < count; ++i) {
      CUmemGenericAllocationHandle h = 0;
      const CUresult err = api.create(&h, r.page, &prop, 0);
      if (err != CUDA_SUCCESS) {
        for (std::size_t j = 0; j < i; ++j) drop_handle(handles[first + j], r.page);
        if (err == CUDA_ERROR_OUT_OF_MEMORY) return false;
        GPUMEMPROF_CU_CHECK(err);
      }
      ++vmm_calls_.creates;
      detail::cuda_own_bytes(device_) += r.page;
      handles[first + i] = h;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const auto at = static_cast<CUdeviceptr>(r.base + offset + i * r.page);
      if (const CUresult err = api.map(at, r.page, 0, handles[first + i], 0); err != CUDA_SUCCESS) {
        unmap_locked(r, offset, i * r.page);  // those mapped so far
        for (std::size_t j = i; j < count; ++j) drop_handle(handles[first + j], r.page);
        GPUMEMPROF_CU_CHECK(err);
      }
      ++vmm_calls_.maps;
    }
    // One access call for the whole range (it spans several physical allocations).
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (const CUresult err = api.set_access(static_cast<CUdeviceptr>(r.base + offset), bytes, &access, 1);
        err != CUDA_SUCCESS) {
      unmap_locked(r, offset, bytes);  // a failed map leaves nothing mapped
      GPUMEMPROF_CU_CHECK(err);
    }
    return true;
  }

  /// Unmaps the whole pages [offset, offset + bytes) of `r` and releases their physical memory
  /// (one cuMemUnmap and one cuMemRelease per page).
  void unmap(Reservation r, std::size_t offset, std::size_t bytes) {
    CudaDeviceGuard guard(device_);
    const OwnDeviceCalls own;
    std::lock_guard lock(mutex_);
    (void)pages_of(r, offset, bytes);
    unmap_locked(r, offset, bytes);
  }

  /// The driver calls of expandable segments so far (this backend's): physical allocations made
  /// and released, cuMemMap and cuMemUnmap calls.
  struct VmmCalls {
    std::size_t creates = 0;
    std::size_t releases = 0;
    std::size_t maps = 0;
    std::size_t unmaps = 0;
  };
  [[nodiscard]] VmmCalls vmm_calls() const {
    std::lock_guard lock(mutex_);
    return vmm_calls_;
  }

  void synchronize_stream(Stream stream) {
    CudaDeviceGuard guard(device_);
    GPUMEMPROF_CUDA_CHECK(cudaStreamSynchronize(stream.as<CUstream_st>()));
  }

  /// A new non-blocking stream on this device (replaying a recorded trace on its streams).
  [[nodiscard]] Stream create_stream() {
    CudaDeviceGuard guard(device_);
    cudaStream_t s = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Stream(s);
  }
  /// Destroys a stream of create_stream(); memory of an allocator that still refers to it must
  /// be released first.
  void destroy_stream(Stream stream) {
    CudaDeviceGuard guard(device_);
    GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(stream.as<CUstream_st>()));
  }
  /// Memory outside gpumemprof's allocators on this device, as the external-memory capture
  /// (track_external_memory) recorded it; empty while it is off.
  [[nodiscard]] ExternalMemory external_memory() const {
    if (auto refresh = detail::cuda_ledger_refresh.load(std::memory_order_acquire)) refresh(device_);
    return detail::cuda_ledger(device_).view();
  }

 private:
  static cudaEvent_t to_cuda(Event e) noexcept { return reinterpret_cast<cudaEvent_t>(e.id); }

  [[nodiscard]] CUmemAllocationProp allocation_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    return prop;
  }

  // The page handles of `r`, after checking that [offset, offset + bytes) is whole pages of it:
  // the driver cannot map or unmap part of a physical allocation.
  std::vector<CUmemGenericAllocationHandle>& pages_of(Reservation r, std::size_t offset, std::size_t bytes) {
    auto it = pages_.find(r.base);
    if (it == pages_.end() || r.page == 0 || offset % r.page != 0 || bytes % r.page != 0 ||
        offset + bytes > it->second.size() * r.page) {
      throw DeviceRuntimeError(name() + ": map/unmap of " + std::to_string(bytes) + " bytes at offset " +
                               std::to_string(offset) + " is not whole pages of reservation " + std::to_string(r.base) +
                               " (pages of " + std::to_string(r.page) + " bytes)");
    }
    return it->second;
  }

  void drop_handle(CUmemGenericAllocationHandle& h, std::size_t page) {
    (void)detail::CudaVmmApi::get().release(h);
    ++vmm_calls_.releases;
    detail::cuda_own_bytes(device_) -= page;
    h = 0;
  }

  void unmap_locked(Reservation r, std::size_t offset, std::size_t bytes) {
    const auto& api = detail::CudaVmmApi::get();
    auto& handles = pages_.at(r.base);
    for (std::size_t done = 0; done < bytes; done += r.page) {
      CUmemGenericAllocationHandle& h = handles[(offset + done) / r.page];
      GPUMEMPROF_CU_CHECK(api.unmap(static_cast<CUdeviceptr>(r.base + offset + done), r.page));
      ++vmm_calls_.unmaps;
      drop_handle(h, r.page);
    }
  }

  int device_;
  mutable std::mutex mutex_;
  std::vector<cudaEvent_t> free_events_;
  std::unordered_map<void*, std::size_t> sizes_;  // cudaMalloc'd segment -> bytes (for cuda_own_bytes)
  mutable std::size_t page_ = 0;                  // the mapping granularity, once asked
  std::map<std::uintptr_t, std::vector<CUmemGenericAllocationHandle>> pages_;  // reservation -> page handles
  VmmCalls vmm_calls_;
};

static_assert(DeviceBackend<CudaBackend>);
static_assert(VirtualMemoryBackend<CudaBackend>);
static_assert(CaptureAwareBackend<CudaBackend>);
static_assert(static_cast<int>(CaptureMode::global) == cudaStreamCaptureModeGlobal &&
              static_cast<int>(CaptureMode::per_thread) == cudaStreamCaptureModeThreadLocal &&
              static_cast<int>(CaptureMode::relaxed) == cudaStreamCaptureModeRelaxed);

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
