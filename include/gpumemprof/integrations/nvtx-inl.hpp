// Layer 6: the NVTX ranges of profiled scopes. Included by nvtx.hpp in header-only mode; compiled
// once in the library (lib/nvtx.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include
// on its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpumemprof/config.hpp"

#if GPUMEMPROF_WITH_NVTX
#include <nvtx3/nvToolsExt.h>

#include "gpumemprof/integrations/nvtx.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/scope_hooks.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

inline nvtxDomainHandle_t nvtx_domain() noexcept {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("gpumemprof");
  return domain;
}

inline std::uint64_t nvtx_scope_enter(void* /*user*/, const char* name) noexcept {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = 0xFF76B900U;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  return static_cast<std::uint64_t>(nvtxDomainRangePushEx(nvtx_domain(), &attributes));
}

inline void nvtx_scope_exit(void* /*user*/, std::uint64_t /*token*/, const ProfileResult& /*result*/) noexcept {
  nvtxDomainRangePop(nvtx_domain());
}

inline constexpr ScopeHook nvtx_scope_hook{&nvtx_scope_enter, &nvtx_scope_exit, nullptr};

// A full registry must not terminate the program during static initialization: no ranges then.
GPUMEMPROF_FUNC std::size_t register_nvtx_scope_hook() noexcept {
  try {
    return register_scope_hook(&nvtx_scope_hook);
  } catch (...) {
    return no_hook_slot;
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
#endif
