// Layer 1: the bodies of AnyBackend::for_device() and is_cuda(), which know every concrete
// backend. Included by any_backend.hpp in header-only mode; compiled once in the library
// (lib/device.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/parse_bytes.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/device/host.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC AnyBackend AnyBackend::for_device(const Device& device) {
  switch (device.kind()) {
    case DeviceKind::host: return AnyBackend(HostBackend{});
    case DeviceKind::sim: {
      SimulatedOptions opt;
      opt.index = device.index();
      env_bytes("GPUMEMPROF_SIM_CAPACITY", "a simulated device's capacity", opt.capacity);
      env_bytes("GPUMEMPROF_SIM_CONTEXT", "a simulated device's context size", opt.context_bytes);
      if (opt.context_bytes > opt.capacity) {
        throw ConfigError(environment_error("GPUMEMPROF_SIM_CONTEXT", std::getenv("GPUMEMPROF_SIM_CONTEXT"),
                                            "the context is larger than the device (" +
                                                std::to_string(opt.capacity) +
                                                " bytes); give a smaller size or raise GPUMEMPROF_SIM_CAPACITY"));
      }
      return AnyBackend(SimulatedBackend(opt));
    }
    case DeviceKind::cuda:
#if GPUMEMPROF_WITH_CUDA
      return AnyBackend(CudaBackend(device.index()));
#else
      break;
#endif
  }
  throw DeviceError("device " + device.str() + " needs the CUDA backend; " + cuda_unavailable_reason());
}

GPUMEMPROF_FUNC void AnyBackend::env_bytes(const char* name, std::string_view what, std::size_t& out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  try {
    out = detail::parse_bytes(text, what);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(environment_error(name, text, e.what()));
  }
}

GPUMEMPROF_FUNC bool AnyBackend::is_cuda() const noexcept {
#if GPUMEMPROF_WITH_CUDA
  return dynamic_cast<const Model<CudaBackend>*>(impl_.get()) != nullptr;
#else
  return false;
#endif
}

GPUMEMPROF_NAMESPACE_END
