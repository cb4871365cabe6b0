// Layer 1: the CUPTI door -- the only file that includes cupti.h -- and what each captured event
// means for the devices' ledgers (device/external_memory.hpp). device/cupti.hpp subscribes and
// calls these handlers from its callbacks.
//   - allocations: the runtime and driver memory APIs (cudaMalloc, cudaMallocPitch, cudaMalloc3D,
//     cuMemAlloc, cuMemAllocPitch, cuMemCreate and their frees). cuMemCreate takes the memory;
//     cuMemMap/cuMemUnmap only tell when a released handle's memory really goes (at its last
//     unmap).
//   - memory pools (cudaMallocAsync, cudaMallocFromPoolAsync, cuMemAllocAsync): the pool's reserved
//     bytes, read when the ledger is read, under the owner of its first allocation.
//   - module code: the growth of unexplained device memory across each module load, under the
//     library holding the module's image (else the caller); modules loaded while a context is being
//     created count by their image size, the rest of that growth being the context.
//   - memory taken inside calls that allocate nothing: the growth of unexplained device memory
//     across a kernel's first launch on a device (the driver grows local memory, the stacks of every
//     resident thread, for kernels that need more: NCCL's), cudaDeviceSetLimit / cuCtxSetLimit and
//     enabling peer access; charged to the caller as an allocation at site "local memory (kernel
//     stacks)" or "peer access".
//   - the context: used memory when a context is created after tracking started (or, for contexts
//     already active, when tracking starts), less gpumemprof's own bytes.
//   - not device allocations, so not in the ledger: managed memory (cudaMallocManaged,
//     cuMemAllocManaged: its pages move between host and device on demand and the driver may evict
//     them; pages resident on a device show in its used bytes, hence as unattributed), pinned host
//     memory (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc, cuMemCreate on a host location).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/call_owner.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/device/external_memory.hpp"

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI
#if defined(__clang__)  // cupti_callbacks.h nests anonymous structs in a union (fine for its compilers)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wnested-anon-types"
#pragma clang diagnostic ignored "-Wgnu-anonymous-struct"
#endif
#include <cupti.h>
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
#include <dlfcn.h>
#include <execinfo.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#endif

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI

namespace cupti {

// Ids in the ledgers: device pointers as they are; physical allocations and pools tagged apart.
inline std::uint64_t handle_id(std::uint64_t h) { return h | (std::uint64_t{1} << 63); }
inline std::uint64_t pool_id(const void* p) { return ExternalLedger::pool_id(reinterpret_cast<std::uintptr_t>(p)); }

struct Pool {
  int device = 0;
  Caller first;
};

/// Device memory the driver took inside a call that allocates nothing (a kernel launch growing
/// local memory, enabling peer access, raising the stack limit), charged to `owner`.
struct Growth {
  int device = 0;
  std::string call;                             ///< "cuLaunchKernelEx", ...
  std::string owner;                            ///< the caller
  std::size_t used_before = 0, used_after = 0;  ///< the driver's used bytes at the last measurement and now
  std::size_t bytes = 0;                        ///< charged (used growth nothing else explains)
};

struct Capture {
  // CUPTI, opened at run time.
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  // The driver, through the runtime's entry points.
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
  CUresult (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*device_get_mem_pool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*pool_get_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_release)(CUdevice) = nullptr;
  CUresult (*ctx_get_limit)(std::size_t*, CUlimit) = nullptr;
  CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;

  CUpti_SubscriberHandle subscriber = nullptr;
  std::atomic<bool> on{false};
  bool failed = false;  // the reason was printed once

  // Guards what follows. Lock order: this, then a ledger's lock; never held across a driver call.
  std::mutex mutex;
  std::unordered_map<std::uint64_t, int> device_of;  // ledger id -> device
  std::map<std::uint64_t, Pool> pools;               // pool id -> where and whose
  // Physical allocations stay while mapped, even once their handle is released (cuMemRelease
  // right after cuMemMap is common): mapping start -> handle id, live mappings per handle id, and
  // the handles released while still mapped.
  std::map<std::uint64_t, std::uint64_t> mapped_at;
  std::unordered_map<std::uint64_t, int> mappings;
  std::unordered_map<std::uint64_t, bool> released;
  std::array<std::int64_t, max_ledger_devices> mark{};   // unattributed at the last measurement
  std::array<bool, max_ledger_devices> context_known{};  // the device's context was measured
  std::array<std::vector<std::pair<std::uint32_t, Caller>>, max_ledger_devices> early;  // modules before it
  std::map<std::uint32_t, std::size_t> early_size;                                      // module -> image bytes
  std::array<std::unordered_set<std::uint64_t>, max_ledger_devices> launched;           // kernels launched
  std::array<std::size_t, max_ledger_devices> stack_limit{};                            // CU_LIMIT_STACK_SIZE last seen
  std::vector<Growth> growths;  // memory taken inside calls that allocate nothing, in order
  // Callbacks that ran, per domain (runtime, driver) and callback id: the diagnostics' count.
  std::array<std::array<std::atomic<std::uint32_t>, 1024>, 2> calls{};
};

inline Capture& capture() {
  static auto* c = new Capture();  // never destroyed: callbacks may come during exit
  return *c;
}

/// Nesting of tracked API calls on this thread (the outermost one is counted).
inline thread_local int api_depth = 0;

inline int index_of(int device) { return std::clamp(device, 0, max_ledger_devices - 1); }

/// The device of `ctx` (the current context when null) and its used bytes, by the driver.
inline bool measure(CUcontext ctx, int& device, std::size_t& used) {
  Capture& c = capture();
  CUcontext current = nullptr;
  (void)c.ctx_get_current(&current);
  const bool push = ctx != nullptr && ctx != current;
  if (push && c.ctx_push(ctx) != CUDA_SUCCESS) return false;
  CUdevice dev = 0;
  std::size_t free = 0, total = 0;
  const bool ok = c.ctx_get_device(&dev) == CUDA_SUCCESS && c.mem_get_info(&free, &total) == CUDA_SUCCESS;
  if (push) (void)c.ctx_pop(&ctx);
  device = index_of(static_cast<int>(dev));
  used = total - free;
  return ok;
}

inline void refresh_pools(int device);

/// Device memory nothing known explains: used less gpumemprof's own, external, code and context.
inline std::int64_t unattributed(int device, std::size_t used) {
  refresh_pools(device);  // pools grow without a call we see
  const ExternalMemory x = cuda_ledger(device).view(false);
  const std::size_t own = cuda_own_bytes(device).load(std::memory_order_relaxed);
  return static_cast<std::int64_t>(used) - static_cast<std::int64_t>(own + x.allocations + x.code + x.context);
}

inline int current_device() {
  CUdevice dev = 0;
  return capture().ctx_get_device(&dev) == CUDA_SUCCESS ? index_of(static_cast<int>(dev)) : 0;
}

inline void on_alloc(int device, std::uint64_t id, std::size_t bytes) {
  Caller who = caller_outside_cuda();
  cuda_ledger(device).record_alloc(id, bytes, who.owner, who.site, std::move(who.stack));
  std::lock_guard lock(capture().mutex);
  capture().device_of[id] = device;
}

inline void free_locked(Capture& c, std::uint64_t id) {
  auto it = c.device_of.find(id);
  if (it == c.device_of.end()) return;  // allocated before tracking started, or by gpumemprof
  cuda_ledger(it->second).record_free(id);
  c.device_of.erase(it);
}

inline void on_free(std::uint64_t id) {
  std::lock_guard lock(capture().mutex);
  free_locked(capture(), id);
}

inline void on_map(std::uint64_t va, std::uint64_t handle) {
  Capture& c = capture();
  std::lock_guard lock(c.mutex);
  if (c.device_of.count(handle) == 0) return;
  c.mapped_at[va] = handle;
  ++c.mappings[handle];
}

inline void on_unmap(std::uint64_t va, std::size_t size) {
  Capture& c = capture();
  std::lock_guard lock(c.mutex);
  for (auto it = c.mapped_at.lower_bound(va); it != c.mapped_at.end() && it->first < va + size;) {
    const std::uint64_t handle = it->second;
    it = c.mapped_at.erase(it);
    if (--c.mappings[handle] > 0) continue;
    c.mappings.erase(handle);
    if (c.released.erase(handle) != 0) free_locked(c, handle);  // its memory goes now
  }
}

inline void on_release(std::uint64_t handle) {
  Capture& c = capture();
  std::lock_guard lock(c.mutex);
  if (auto m = c.mappings.find(handle); m != c.mappings.end() && m->second > 0) {
    c.released[handle] = true;  // still mapped: freed at its last unmap
    return;
  }
  free_locked(c, handle);
}

inline void on_pool(int device, CUmemoryPool pool) {
  if (pool == nullptr && capture().device_get_mem_pool(&pool, static_cast<CUdevice>(device)) != CUDA_SUCCESS) return;
  Capture& c = capture();
  {
    std::lock_guard lock(c.mutex);
    if (c.pools.count(pool_id(pool)) != 0) return;
  }
  Pool p{device, caller_outside_cuda()};
  if (p.first.site.empty()) p.first.site = "memory pool";
  std::lock_guard lock(c.mutex);
  c.pools.emplace(pool_id(pool), std::move(p));
}

/// cudaMemPoolDestroy / cuMemPoolDestroy: the pool's reservation leaves the ledger (a destroyed
/// pool cannot be asked any more, so its last figure would stay behind for good).
inline void on_pool_destroy(int device, CUmemoryPool pool) {
  Capture& c = capture();
  {
    std::lock_guard lock(c.mutex);
    auto it = c.pools.find(pool_id(pool));
    if (it == c.pools.end()) return;
    device = it->second.device;
    c.pools.erase(it);
  }
  cuda_ledger(device).forget_pool(pool_id(pool));
}

/// Brings the pools' reserved bytes of `device` into its ledger (cuda_ledger_refresh).
inline void refresh_pools(int device) {
  Capture& c = capture();
  std::vector<std::pair<std::uint64_t, Pool>> pools;
  {
    std::lock_guard lock(c.mutex);  // not held across driver calls: a callback may wait for it
    for (const auto& [id, pool] : c.pools) {
      if (pool.device == device) pools.emplace_back(id, pool);
    }
  }
  for (const auto& [id, pool] : pools) {
    std::uint64_t reserved = 0;
    auto* handle = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(id & ~ExternalLedger::pool_id(0)));
    if (c.pool_get_attribute(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
      on_pool_destroy(device, handle);  // destroyed without a call we saw: its memory is gone
      continue;
    }
    cuda_ledger(device).record_pool(id, reserved, pool.first.owner, pool.first.site, pool.first.stack);
  }
}

/// The library whose image holds a module's code (the cubin lies in its data), else the caller.
inline Caller module_owner(const CUpti_ModuleResourceData* m) {
  Dl_info info{};
  if (m != nullptr && m->pCubin != nullptr && ::dladdr(m->pCubin, &info) != 0 && info.dli_fname != nullptr &&
      !is_cuda_plumbing(info.dli_fname)) {
    return {owner_name(info.dli_fname), {}, {}};
  }
  return caller_outside_cuda();
}

inline void on_module_loaded(const CUpti_ResourceData* r) {
  const auto* m = static_cast<const CUpti_ModuleResourceData*>(r->resourceDescriptor);
  int device = 0;
  std::size_t used = 0;
  if (m == nullptr || !measure(r->context, device, used)) return;
  Capture& c = capture();
  {
    std::lock_guard lock(c.mutex);
    if (!c.context_known[device]) {  // the context is being created: counted when it is
      c.early[device].emplace_back(m->moduleId, module_owner(m));
      c.early_size[m->moduleId] = m->cubinSize;
      return;
    }
  }
  const std::int64_t now = unattributed(device, used);
  std::lock_guard lock(c.mutex);
  const std::int64_t grown = now - c.mark[device];
  if (grown > 0) cuda_ledger(device).record_code(m->moduleId, static_cast<std::size_t>(grown), module_owner(m).owner);
  c.mark[device] = grown > 0 ? now - grown : now;
}

/// A context's memory: what its device uses beyond what is known, less the modules loaded with it.
inline void on_context(CUcontext ctx) {
  int device = 0;
  std::size_t used = 0;
  if (!measure(ctx, device, used)) return;
  Capture& c = capture();
  const std::int64_t fresh = unattributed(device, used);
  std::lock_guard lock(c.mutex);
  std::int64_t context = std::max<std::int64_t>(fresh, 0);
  for (const auto& [module, who] : c.early[device]) {  // estimated by their image size
    const auto bytes = static_cast<std::int64_t>(std::min<std::size_t>(c.early_size[module], context));
    if (bytes > 0) cuda_ledger(device).record_code(module, static_cast<std::size_t>(bytes), who.owner);
    context -= bytes;
  }
  c.early[device].clear();
  ExternalLedger& ledger = cuda_ledger(device);
  ledger.set_context(ledger.view(false).context + static_cast<std::size_t>(context));
  c.context_known[device] = true;
  c.mark[device] = 0;
}

/// Inside a call that allocates nothing (`site`): what the device's used memory grew by that
/// nothing known explains is charged to the caller as an allocation. Local memory is the usual
/// case: the driver reserves a kernel's stack for every thread that can be resident on every SM,
/// and grows that reservation at the first launch of a kernel needing more (NCCL's kernels do).
inline void on_growth_point(const char* site, CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  int device = 0;
  std::size_t used = 0;
  if (!measure(nullptr, device, used)) return;
  const std::int64_t now = unattributed(device, used);
  Capture& c = capture();
  std::int64_t grown = 0;
  {
    std::lock_guard lock(c.mutex);
    if (!c.context_known[device]) return;
    grown = now - c.mark[device];
    c.mark[device] = grown > 0 ? now - grown : now;
    if (grown <= 0) return;
  }
  Caller who = caller_outside_cuda();
  const char* call = "?";
  (void)c.callback_name(domain, id, &call);
  std::lock_guard lock(c.mutex);
  const auto bytes = static_cast<std::size_t>(grown);
  cuda_ledger(device).record_alloc((std::uint64_t{1} << 61) | c.growths.size(), bytes, who.owner, site,
                                   std::move(who.stack));
  c.growths.push_back(Growth{device, call, who.owner, used - bytes, used, bytes});
}

/// A kernel launch (`kernel`: its function, 0 when unknown): measured at the first launch of each
/// kernel on a device, and whenever the stack limit changed since the last launch there.
inline void on_launch(std::uint64_t kernel, CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  Capture& c = capture();
  std::size_t limit = 0;
  (void)c.ctx_get_limit(&limit, CU_LIMIT_STACK_SIZE);
  const auto device = static_cast<std::size_t>(current_device());
  {
    std::lock_guard lock(c.mutex);
    const bool new_kernel = kernel != 0 && c.launched[device].insert(kernel).second;
    if (!new_kernel && limit == c.stack_limit[device]) return;
    c.stack_limit[device] = limit;
  }
  on_growth_point("local memory (kernel stacks)", domain, id);
}

}  // namespace cupti

#endif

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
