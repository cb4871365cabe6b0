// The calling thread's memory category (history/memory_category.hpp sets it), read by the
// allocator once per allocation to stamp the block. It lives below the allocator so that the
// allocator core needs nothing from the history layer: it only copies an id.
#pragma once

#include <cstdint>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Interned category id of the calling thread's innermost memory_category scope; 0 = none
/// (unknown). Constant-initialized: reading it is one thread-local load, no TLS wrapper.
inline thread_local std::uint32_t thread_memory_category = 0;

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
