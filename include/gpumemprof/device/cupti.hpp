// Layer 1: tracking device memory outside gpumemprof's allocators through CUPTI, on every CUDA
// device -- opening libcupti at run time, subscribing to the runtime, driver and resource callbacks,
// and handing each event to the capture (device/cupti_capture.hpp, the CUPTI door, which says what
// each kind of event means for the devices' ledgers). A call made inside another tracked call (the
// runtime's cudaMalloc calling the driver's cuMemAlloc) counts once, at the outer call; calls made
// by gpumemprof's own backends (OwnDeviceCalls) not at all.
// The owner of a call is the first library on the stack outside libcuda, libcudart and libcupti,
// by dladdr: "libnccl.so", "libcublas.so", or the program's file name; its site the function there.
// Without libcupti, or with another CUPTI subscriber (Nsight), tracking prints one line and stays
// off; everything else works as before.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/cupti_capture.hpp"

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI
#include <dlfcn.h>
#include <execinfo.h>
#endif

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI

namespace cupti {

inline constexpr CUpti_CallbackDomain runtime_api = CUPTI_CB_DOMAIN_RUNTIME_API;
inline constexpr CUpti_CallbackDomain driver_api = CUPTI_CB_DOMAIN_DRIVER_API;

template <class P>
const P& params(const CUpti_CallbackData* cb) {
  return *static_cast<const P*>(cb->functionParams);
}

inline void on_runtime(CUpti_CallbackId id, const CUpti_CallbackData* cb) {
  if (*static_cast<const cudaError_t*>(cb->functionReturnValue) != cudaSuccess) return;
  switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: {
      const auto& p = params<cudaMalloc_v3020_params>(cb);
      on_alloc(current_device(), reinterpret_cast<std::uintptr_t>(*p.devPtr), p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020: {
      const auto& p = params<cudaMallocPitch_v3020_params>(cb);
      on_alloc(current_device(), reinterpret_cast<std::uintptr_t>(*p.devPtr), *p.pitch * p.height);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020: {
      const auto& p = params<cudaMalloc3D_v3020_params>(cb);
      on_alloc(current_device(), reinterpret_cast<std::uintptr_t>(p.pitchedDevPtr->ptr),
               p.pitchedDevPtr->pitch * p.extent.height * p.extent.depth);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
      on_free(reinterpret_cast<std::uintptr_t>(params<cudaFree_v3020_params>(cb).devPtr));
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020: on_pool(current_device(), nullptr); break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020:
      on_pool(current_device(),
              reinterpret_cast<CUmemoryPool>(params<cudaMallocFromPoolAsync_v11020_params>(cb).memPool));
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolDestroy_v11020:
      on_pool_destroy(current_device(),
                      reinterpret_cast<CUmemoryPool>(params<cudaMemPoolDestroy_v11020_params>(cb).memPool));
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cudaLaunchKernel_v7000_params>(cb).func), runtime_api, id);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cudaLaunchKernelExC_v11060_params>(cb).func), runtime_api, id);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cudaLaunchCooperativeKernel_v9000_params>(cb).func),
                runtime_api, id);
      break;
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000: on_launch(0, runtime_api, id); break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSetLimit_v3020:
      on_growth_point("local memory (kernel stacks)", runtime_api, id);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceEnablePeerAccess_v4000:
      on_growth_point("peer access", runtime_api, id);
      break;
    default: break;
  }
}

inline void on_driver(CUpti_CallbackId id, const CUpti_CallbackData* cb) {
  if (*static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS) return;
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      const auto& p = params<cuMemAlloc_v2_params>(cb);
      on_alloc(current_device(), *p.dptr, p.bytesize);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const auto& p = params<cuMemAllocPitch_v2_params>(cb);
      on_alloc(current_device(), *p.dptr, *p.pPitch * p.Height);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: on_free(params<cuMemFree_v2_params>(cb).dptr); break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      const auto& p = params<cuMemCreate_params>(cb);
      const bool on_device = p.prop != nullptr && p.prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
      if (on_device) on_alloc(index_of(p.prop->location.id), handle_id(*p.handle), p.size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: on_release(handle_id(params<cuMemRelease_params>(cb).handle)); break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      const auto& p = params<cuMemMap_params>(cb);
      on_map(p.ptr, handle_id(p.handle));
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      const auto& p = params<cuMemUnmap_params>(cb);
      on_unmap(p.ptr, p.size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: on_pool(current_device(), nullptr); break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
      on_pool(current_device(), params<cuMemAllocFromPoolAsync_params>(cb).pool);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy:
      on_pool_destroy(current_device(), params<cuMemPoolDestroy_params>(cb).pool);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cuLaunchKernel_params>(cb).f), driver_api, id);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cuLaunchKernelEx_params>(cb).f), driver_api, id);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      on_launch(reinterpret_cast<std::uintptr_t>(params<cuLaunchCooperativeKernel_params>(cb).f), driver_api, id);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSetLimit: on_growth_point("local memory (kernel stacks)", driver_api, id); break;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxEnablePeerAccess: on_growth_point("peer access", driver_api, id); break;
    default: break;
  }
}

inline void CUPTIAPI on_callback(void* /*userdata*/, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                 const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    const auto* r = static_cast<const CUpti_ResourceData*>(data);
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) on_context(r->context);
    if (id == CUPTI_CBID_RESOURCE_MODULE_LOADED) on_module_loaded(r);
    if (id == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
      const auto* m = static_cast<const CUpti_ModuleResourceData*>(r->resourceDescriptor);
      for (int d = 0; m != nullptr && d < max_ledger_devices; ++d) {  // the one ledger that has it
        if (cuda_ledger(d).record_code_unload(m->moduleId)) break;
      }
    }
    return;
  }
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    ++api_depth;
    return;
  }
  if (api_depth <= 0) return;  // entered before tracking started
  capture().calls[domain == CUPTI_CB_DOMAIN_DRIVER_API ? 1 : 0][id % 1024].fetch_add(1, std::memory_order_relaxed);
  if (--api_depth != 0 || own_device_call_depth > 0) return;  // nested, or gpumemprof's own
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) on_runtime(id, cb);
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) on_driver(id, cb);
}

inline bool fail(const std::string& why) {
  capture().failed = true;
  std::fprintf(stderr, "gpumemprof: memory outside the allocator is not tracked: %s\n", why.c_str());
  return false;
}

template <class F>
bool symbol(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  return f != nullptr;
}

inline bool start() {
  Capture& c = capture();
  if (const std::string why = cuda_unavailable_reason(); !why.empty()) return fail(why);
  void* lib = nullptr;
  // A copy the process already holds first (PyTorch brings its own): two copies would both
  // attach to the driver.
  for (const int mode : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW | RTLD_GLOBAL}) {
    for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
      if (lib == nullptr) lib = ::dlopen(name, mode);
    }
  }
  if (lib == nullptr) {
    return fail(
        "libcupti.so was not found; it comes with the CUDA Toolkit: add its directory (e.g. "
        "/usr/local/cuda/lib64) to LD_LIBRARY_PATH");
  }
  if (!symbol(lib, c.subscribe, "cuptiSubscribe") || !symbol(lib, c.enable_callback, "cuptiEnableCallback") ||
      !symbol(lib, c.result_string, "cuptiGetResultString") || !symbol(lib, c.callback_name, "cuptiGetCallbackName")) {
    return fail("the libcupti.so found lacks cuptiSubscribe; install a CUDA Toolkit's CUPTI");
  }
  if (!driver_entry(c.ctx_get_device, "cuCtxGetDevice") || !driver_entry(c.ctx_get_current, "cuCtxGetCurrent") ||
      !driver_entry(c.ctx_push, "cuCtxPushCurrent") || !driver_entry(c.ctx_pop, "cuCtxPopCurrent") ||
      !driver_entry(c.mem_get_info, "cuMemGetInfo") || !driver_entry(c.device_get_mem_pool, "cuDeviceGetMemPool") ||
      !driver_entry(c.pool_get_attribute, "cuMemPoolGetAttribute") ||
      !driver_entry(c.primary_state, "cuDevicePrimaryCtxGetState") ||
      !driver_entry(c.primary_retain, "cuDevicePrimaryCtxRetain") ||
      !driver_entry(c.primary_release, "cuDevicePrimaryCtxRelease") ||
      !driver_entry(c.ctx_get_limit, "cuCtxGetLimit")) {
    return fail("the CUDA driver lacks functions the capture needs (cuMemGetInfo, cuDeviceGetMemPool, ...)");
  }
  void* warm[4];
  (void)::backtrace(warm, 4);  // loads the unwinder now, not inside a CUDA call
  const CUptiResult r = c.subscribe(&c.subscriber, on_callback, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    return fail(
        "another profiler (Nsight Systems or Nsight Compute?) already subscribes to CUPTI, which allows one "
        "subscriber; run without it to see memory outside the allocator");
  }
  if (r != CUPTI_SUCCESS) {
    const char* text = "unknown error";
    (void)c.result_string(r, &text);
    return fail(std::string("CUPTI refused to subscribe: ") + text);
  }
  // Contexts already active: measured now (they then also hold whatever was allocated before);
  // through the driver's primary context, so that no device gets a context it did not have.
  for (int d = 0; d < std::min(cuda_device_count(), max_ledger_devices); ++d) {
    cuda_ledger(d).set_tracking(true);
    unsigned flags = 0;
    int active = 0;
    CUcontext ctx = nullptr;
    if (c.primary_state(d, &flags, &active) == CUDA_SUCCESS && active != 0 &&
        c.primary_retain(&ctx, d) == CUDA_SUCCESS) {
      std::size_t used = 0;
      int device = d;
      if (measure(ctx, device, used)) {
        cuda_ledger(d).set_context(static_cast<std::size_t>(std::max<std::int64_t>(unattributed(d, used), 0)));
        std::lock_guard lock(c.mutex);
        c.context_known[static_cast<std::size_t>(d)] = true;
      }
      (void)c.primary_release(d);
    }
  }
  const CUpti_CallbackId runtime[] = {CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolDestroy_v11020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
                                      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
                                      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSetLimit_v3020,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaDeviceEnablePeerAccess_v4000};
  const CUpti_CallbackId driver[] = {CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemMap,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                     CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
                                     CUPTI_DRIVER_TRACE_CBID_cuCtxSetLimit,
                                     CUPTI_DRIVER_TRACE_CBID_cuCtxEnablePeerAccess};
  const CUpti_CallbackId resource[] = {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_MODULE_LOADED,
                                       CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING};
  bool ok = true;
  for (const CUpti_CallbackId id : runtime)
    ok &= c.enable_callback(1, c.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id) == CUPTI_SUCCESS;
  for (const CUpti_CallbackId id : driver)
    ok &= c.enable_callback(1, c.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) == CUPTI_SUCCESS;
  for (const CUpti_CallbackId id : resource)
    ok &= c.enable_callback(1, c.subscriber, CUPTI_CB_DOMAIN_RESOURCE, id) == CUPTI_SUCCESS;
  if (!ok) return fail("CUPTI refused to enable the memory callbacks");
  cuda_ledger_refresh.store(&refresh_pools, std::memory_order_release);
  c.on.store(true, std::memory_order_release);
  return true;
}

/// Diagnostics: the growths charged so far, and the callbacks that ran ("cuMemCreate x146"), by name.
inline std::vector<Growth> growths() {
  std::lock_guard lock(capture().mutex);
  return capture().growths;
}
inline std::vector<std::pair<std::string, std::uint32_t>> callbacks_seen() {
  Capture& c = capture();
  std::vector<std::pair<std::string, std::uint32_t>> out;
  for (int d = 0; d < 2 && c.callback_name != nullptr; ++d) {
    for (std::uint32_t id = 0; id < 1024; ++id) {
      const std::uint32_t n = c.calls[static_cast<std::size_t>(d)][id].load(std::memory_order_relaxed);
      const char* name = "?";
      if (n != 0) (void)c.callback_name(d == 1 ? driver_api : runtime_api, id, &name);
      if (n != 0) out.emplace_back(name, n);
    }
  }
  return out;
}

}  // namespace cupti

/// Starts the capture on every CUDA device (once; later calls return the first outcome).
/// False, with one line on stderr the first time, when it cannot run.
inline bool start_external_capture() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  cupti::Capture& c = cupti::capture();
  if (c.on.load(std::memory_order_acquire)) return true;
  return !c.failed && cupti::start();
}

#else  // no CUPTI in this build

inline bool start_external_capture() {
  static const bool said = [] {
    std::fprintf(stderr,
                 "gpumemprof: memory outside the allocator is not tracked: this build has no %s (configure with "
                 "CUDA and -Dcupti=enabled)\n",
                 GPUMEMPROF_WITH_CUDA ? "CUPTI" : "CUDA");
    return true;
  }();
  (void)said;
  return false;
}

#endif

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
