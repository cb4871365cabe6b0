// Layer 6: NVTX ranges for profiled scopes. Including this header (the umbrella header does)
// registers a scope hook: every profile_context / profile_function scope of every profiler
// then shows in Nsight Systems as a range named after the scope, in the "gpumemprof" domain,
// nested like the scopes on their thread.
//
// NVTX3 is header-only; without a tool attached (nsys, ncu), each range costs a few
// nanoseconds. Built with GPUMEMPROF_WITH_NVTX=0 the header registers nothing.
#pragma once

#include <cstddef>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// True when this build opens NVTX ranges for profiled scopes.
inline constexpr bool nvtx_available = GPUMEMPROF_WITH_NVTX != 0;

#if GPUMEMPROF_WITH_NVTX

namespace detail {

inline constexpr std::size_t no_hook_slot = ~std::size_t{0};

/// Registers the NVTX scope hook; its slot, or no_hook_slot when the registry is full.
std::size_t register_nvtx_scope_hook() noexcept;

#ifndef GPUMEMPROF_LIB_SOURCE
// Registered once per program, whichever translation units include this header (the compiled
// library's own sources do not: a program that never includes it opens no ranges).
inline const std::size_t nvtx_hook_slot = register_nvtx_scope_hook();
#endif

}  // namespace detail

#endif

/// True when the NVTX scope hook is registered (NVTX available and this header included).
[[nodiscard]] inline bool nvtx_scope_ranges_enabled() noexcept {
#if GPUMEMPROF_WITH_NVTX && !defined(GPUMEMPROF_LIB_SOURCE)
  return detail::nvtx_hook_slot != detail::no_hook_slot;
#else
  return false;
#endif
}

GPUMEMPROF_NAMESPACE_END

// The ranges (nvToolsExt.h): in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/nvtx.cpp).
#if GPUMEMPROF_WITH_NVTX && !defined(GPUMEMPROF_COMPILED_LIB)
#include "gpumemprof/integrations/nvtx-inl.hpp"
#endif
