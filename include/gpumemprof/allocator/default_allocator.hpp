// Layer 2: one caching allocator per device for the whole process, and the torch.cuda.*-style
// free functions over it. Every function takes a Device ("cuda:0", "sim:1", 0, ...); the default
// is the current device (Device()).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <memory>
#include <mutex>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The allocator type behind default_allocator(): a CachingAllocator over whichever backend
/// the device needs.
using DeviceAllocator = CachingAllocator<AnyBackend>;

#ifdef GPUMEMPROF_COMPILED_LIB
// Compiled once, in the gpumemprof library (lib/caching_allocator.cpp); other backends
// (CachingAllocator<SimulatedBackend>, ...) need the header-only mode.
extern template class CachingAllocator<AnyBackend>;
#endif

namespace detail {
struct DefaultAllocatorSlot {
  std::mutex mutex;  // not std::call_once: a throwing first call (a bad $GPUMEMPROF_ALLOC_CONF)
                     // must leave the slot retryable, and TSan's pthread_once hangs after a throw
  std::atomic<DeviceAllocator*> allocator{nullptr};
};
inline constexpr int max_cuda_devices = 64;

/// Told about each default allocator right after it is created, under its slot's mutex (the
/// history layer's category ledgers attach this way); nullptr = nobody.
inline std::atomic<void (*)(DeviceAllocator&)> default_allocator_created{nullptr};

struct DefaultAllocatorSlots {
  std::array<DefaultAllocatorSlot, max_cuda_devices> cuda;
  std::array<DefaultAllocatorSlot, Device::simulated_device_count> sim;
  DefaultAllocatorSlot host;
};
DefaultAllocatorSlots& default_allocator_slots();
DefaultAllocatorSlot& default_allocator_slot(const Device& device);

/// Calls `f(DeviceAllocator&)` for every default allocator created so far, under its slot's
/// mutex: an allocator being created meanwhile is either visited here or created after, seeing
/// a default_allocator_created hook set before this call.
template <class F>
void for_each_default_allocator(F&& f) {
  DefaultAllocatorSlots& slots = default_allocator_slots();
  auto visit = [&f](DefaultAllocatorSlot& slot) {
    std::lock_guard lock(slot.mutex);
    if (DeviceAllocator* a = slot.allocator.load(std::memory_order_relaxed)) f(*a);
  };
  for (auto& slot : slots.cuda) visit(slot);
  for (auto& slot : slots.sim) visit(slot);
  visit(slots.host);
}
}  // namespace detail

/// Options of track_external_memory.
struct ExternalTrackingOptions {
  /// Also record the C++ stack of every allocation outside the allocator: the owner's top call
  /// site then comes with its stack (function, file, line) in device_memory(), memory_summary,
  /// snapshots and reports. Costs a stack walk and a copy of its frames per allocation.
  bool stacks = false;
};

/// Starts tracking device memory taken outside gpumemprof's allocators on every CUDA device:
/// libraries' own cudaMalloc and cuMemCreate (NCCL, cuBLAS, cuDNN, the program itself), memory
/// pools, module code and the CUDA context, each under its owner (device/cupti.hpp). Call it early
/// in main, before libraries make their buffers; $GPUMEMPROF_TRACK_EXTERNAL=1 does the same when
/// the first CUDA default allocator is made ($GPUMEMPROF_TRACK_EXTERNAL=stacks: with stacks).
/// device_memory() shows the result. Returns whether tracking is on; when it cannot be (no CUPTI,
/// another profiler subscribed, no GPU) it says why in one line on stderr, and everything else
/// works as before. Off, it costs nothing. Stacks, once asked for, stay on; they apply to
/// simulated devices too (sim_external_malloc), which need no tracking.
bool track_external_memory(ExternalTrackingOptions options = {});

/// The process-wide allocator of `device`, created on first use with $GPUMEMPROF_ALLOC_CONF
/// (and, for CUDA devices, tracking of memory outside it with $GPUMEMPROF_TRACK_EXTERNAL=1).
[[nodiscard]] DeviceAllocator& default_allocator(const Device& device = Device());

/// torch.cuda.memory_stats(device).
[[nodiscard]] inline MemoryStats memory_stats(const Device& device = Device()) {
  return default_allocator(device).memory_stats();
}
/// Bytes in allocated blocks now (torch.cuda.memory_allocated).
[[nodiscard]] inline std::int64_t memory_allocated(const Device& device = Device()) {
  return default_allocator(device).gauges().allocated_bytes;
}
/// Peak of memory_allocated since the last reset_peak_memory_stats.
[[nodiscard]] inline std::int64_t max_memory_allocated(const Device& device = Device()) {
  return default_allocator(device).memory_stats().allocated_bytes.all().peak;
}
/// Bytes held from the device now (torch.cuda.memory_reserved).
[[nodiscard]] inline std::int64_t memory_reserved(const Device& device = Device()) {
  return default_allocator(device).gauges().reserved_bytes;
}
/// Peak of memory_reserved since the last reset_peak_memory_stats.
[[nodiscard]] inline std::int64_t max_memory_reserved(const Device& device = Device()) {
  return default_allocator(device).memory_stats().reserved_bytes.all().peak;
}
inline void reset_peak_memory_stats(const Device& device = Device()) {
  default_allocator(device).reset_peak_memory_stats();
}
inline void reset_accumulated_memory_stats(const Device& device = Device()) {
  default_allocator(device).reset_accumulated_memory_stats();
}
/// Returns the cached, unused memory of `device` to the device (torch.cuda.empty_cache).
inline void empty_cache(const Device& device = Device()) { default_allocator(device).empty_cache(); }
/// Call before destroying `stream` (cudaStreamDestroy): see CachingAllocator::release_stream.
inline void release_stream(Stream stream, const Device& device = Device()) {
  default_allocator(device).release_stream(stream);
}
/// Caps the default allocator of `device` at `fraction` of the device's memory.
inline void set_per_process_memory_fraction(double fraction, const Device& device = Device()) {
  default_allocator(device).set_memory_fraction(fraction);
}
/// Bytes in use on the whole device (total - free, as cudaMemGetInfo says), including memory
/// this library does not own: other allocators, other processes, the CUDA context.
[[nodiscard]] inline std::size_t device_memory_used(const Device& device = Device()) {
  const MemInfo info = default_allocator(device).mem_get_info();
  return info.total - info.free;
}

GPUMEMPROF_NAMESPACE_END

// The bodies of default_allocator() and its slots: in the compiled library under
// GPUMEMPROF_COMPILED_LIB (lib/default_allocator.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/default_allocator-inl.hpp"
#endif
