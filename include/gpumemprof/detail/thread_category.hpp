// The calling thread's memory category (history/memory_category.hpp sets it), read by the
// allocator once per allocation to stamp the block, and what else of the thread its events carry. It lives below the allocator so that the
// allocator core needs nothing from the history layer: it only copies an id.
#pragma once

#include <cstdint>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Interned category id of the calling thread's innermost memory_category scope; 0 = none
/// (unknown). Constant-initialized: reading it is one thread-local load, no TLS wrapper.
inline thread_local std::uint32_t thread_memory_category = 0;

/// The calling thread's user metadata id (history/user_metadata.hpp sets it), copied into every
/// allocator event the thread causes: events reach their sinks later, maybe on another thread.
inline thread_local std::uint32_t thread_user_metadata = 0;

/// The context handle (an interned stack) that an event sink's `prepare` returned at the entry of
/// the allocator call this thread is in; 0 outside such a call. Copied into the call's events.
inline thread_local std::uint64_t thread_event_context = 0;

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
