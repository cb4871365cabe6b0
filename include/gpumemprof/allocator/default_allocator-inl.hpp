// Layer 2: the bodies of default_allocator() and its per-device slots. Included by
// default_allocator.hpp in header-only mode; compiled once in the library
// (lib/default_allocator.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on
// its own.
#pragma once

#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cupti.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC bool track_external_memory(ExternalTrackingOptions options) {
  if (options.stacks) detail::external_stacks.store(true, std::memory_order_relaxed);
  return detail::start_external_capture();
}

namespace detail {
GPUMEMPROF_FUNC DefaultAllocatorSlots& default_allocator_slots() {
  // Never destroyed: other static destructors (and late frees at exit) may still use them.
  static auto* slots = new DefaultAllocatorSlots();
  return *slots;
}

GPUMEMPROF_FUNC DefaultAllocatorSlot& default_allocator_slot(const Device& device) {
  DefaultAllocatorSlots& slots = default_allocator_slots();
  switch (device.kind()) {
    case DeviceKind::cuda:
      if (device.index() >= max_cuda_devices) {
        throw DeviceError("device " + device.str() + ": gpumemprof supports at most " +
                          std::to_string(max_cuda_devices) + " CUDA devices");
      }
      return slots.cuda[static_cast<std::size_t>(device.index())];
    case DeviceKind::sim: return slots.sim[static_cast<std::size_t>(device.index())];
    case DeviceKind::host: break;
  }
  return slots.host;
}
}  // namespace detail

GPUMEMPROF_FUNC DeviceAllocator& default_allocator(const Device& device) {
  auto& slot = detail::default_allocator_slot(device);
  if (DeviceAllocator* a = slot.allocator.load(std::memory_order_acquire)) return *a;
  static const std::string_view track_env = [] {
    const char* v = std::getenv("GPUMEMPROF_TRACK_EXTERNAL");
    const std::string_view env = v != nullptr ? v : "";
    if (env == "stacks") detail::external_stacks.store(true, std::memory_order_relaxed);
    return env;
  }();
  if (device.kind() == DeviceKind::cuda) {
    static const bool tracking = (track_env == "1" || track_env == "stacks") && track_external_memory();
    (void)tracking;
  }
  std::lock_guard lock(slot.mutex);
  if (slot.allocator.load(std::memory_order_relaxed) == nullptr) {
    auto* created = new DeviceAllocator(AnyBackend::for_device(device), AllocatorConfig::from_env());
    if (auto* hook = detail::default_allocator_created.load(std::memory_order_acquire)) hook(*created);
    slot.allocator.store(created, std::memory_order_release);
  }
  return *slot.allocator.load(std::memory_order_relaxed);
}

GPUMEMPROF_NAMESPACE_END
