// Layer 2: the simulated device's side of device_memory.hpp (sim_external_malloc and
// sim_external_free). Included by device_memory.hpp in header-only mode; compiled once in the
// library (lib/device.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {
inline SimulatedBackend& simulated_backend(const Device& device, const char* what) {
  SimulatedBackend* sim =
      device.kind() == DeviceKind::sim ? default_allocator(device).backend().target<SimulatedBackend>() : nullptr;
  if (sim == nullptr) {
    throw DeviceError(std::string(what) + ": " + device.str() +
                      " is not a simulated device; name one of sim:0 ... sim:" +
                      std::to_string(Device::simulated_device_count - 1));
  }
  return *sim;
}
}  // namespace detail

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC void* sim_external_malloc(const Device& device, std::size_t bytes,
                                                              std::string_view owner, std::string_view site) {
  return detail::simulated_backend(device, "sim_external_malloc").external_malloc(bytes, owner, site);
}

GPUMEMPROF_FUNC void sim_external_free(const Device& device, void* ptr) {
  detail::simulated_backend(device, "sim_external_free").external_free(ptr);
}

GPUMEMPROF_NAMESPACE_END
