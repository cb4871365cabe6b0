// Layer 6: NVTX ranges for profiled scopes. Including this header (the umbrella header does)
// registers a scope hook: every profile_context / profile_function scope of every profiler
// then shows in Nsight Systems as a range named after the scope, in the "gpumemprof" domain,
// nested like the scopes on their thread.
//
// NVTX3 is header-only; without a tool attached (nsys, ncu), each range costs a few
// nanoseconds. Built with GPUMEMPROF_WITH_NVTX=0 the header registers nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/scope_hooks.hpp"

#if GPUMEMPROF_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

GPUMEMPROF_NAMESPACE_BEGIN

/// True when this build opens NVTX ranges for profiled scopes.
inline constexpr bool nvtx_available = GPUMEMPROF_WITH_NVTX != 0;

#if GPUMEMPROF_WITH_NVTX

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

inline constexpr std::size_t no_hook_slot = ~std::size_t{0};

// Registered once per program, whichever translation units include this header. A full
// registry must not terminate the program during static initialization: no ranges then.
inline const std::size_t nvtx_hook_slot = [] {
  try {
    return register_scope_hook(&nvtx_scope_hook);
  } catch (...) {
    return no_hook_slot;
  }
}();

}  // namespace detail

#endif

/// True when the NVTX scope hook is registered (NVTX available and this header included).
[[nodiscard]] inline bool nvtx_scope_ranges_enabled() noexcept {
#if GPUMEMPROF_WITH_NVTX
  return detail::nvtx_hook_slot != detail::no_hook_slot;
#else
  return false;
#endif
}

GPUMEMPROF_NAMESPACE_END
