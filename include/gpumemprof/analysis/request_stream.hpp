// Analysis layer: a probe's request stream -- the allocations one device's trace made, in order,
// each with what stays the same when the program runs again at another batch size or sequence
// length (its stream, the user's frame where it was made, its category) and what changes (its
// size). The forecast (forecast.hpp) aligns the streams of several probes (stream_alignment.hpp).
//
// Streams are numbered by first appearance (the default stream stays 0): the raw cudaStream_t
// values of two processes differ. A site is the user's frame of the allocation's stack
// (user_frame.hpp), hashed; 0 when no stack was recorded. A category is the one the entry's
// user_metadata carries (memory_category.hpp), hashed; 0 when none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One allocation of a probe's trace.
struct ProbeRequest {
  static constexpr std::uint32_t kNeverFreed = 0xFFFF'FFFF;
  std::uint64_t size = 0;                  ///< requested bytes
  std::uint64_t site = 0;                  ///< hash of the user's frame label; 0 = no stack recorded
  std::uint64_t category = 0;              ///< hash of the recorded category; 0 = none
  std::uint32_t stream = 0;                ///< streams numbered by first appearance; the default stream is 0
  std::uint32_t alloc_event = 0;           ///< index of its alloc entry in the trace
  std::uint32_t free_event = kNeverFreed;  ///< index of its free_completed entry
  /// What must be equal for two probes' requests to be the same request (all but the size).
  [[nodiscard]] std::uint64_t key() const noexcept {
    return (site * 0x9E3779B97F4A7C15ull) ^ (category * 0xC2B2AE3D27D4EB4Full) ^ stream;
  }
};

/// The requests of one device's trace, in order, and what the trace recorded about them.
struct RequestStream {
  int device = 0;
  std::vector<ProbeRequest> requests;
  std::unordered_map<std::uint64_t, std::string> site_labels;     ///< site hash -> "name at file:line"
  std::unordered_map<std::uint64_t, std::string> category_names;  ///< category hash -> name
  std::uint64_t recorded_peak_reserved = 0;                       ///< from the segment events (0 when none recorded)
  std::uint64_t peak_requested = 0;                               ///< most requested bytes live at once
  std::size_t frees_before_allocs = 0;                            ///< frees of blocks the trace never allocated
  std::size_t events = 0;
  [[nodiscard]] bool has_sites() const noexcept { return !site_labels.empty(); }
};

/// The device whose trace has the most entries (-1 when no trace has any).
[[nodiscard]] int busiest_device(const CompactSnapshot& snap);

/// The request stream of `snap`'s trace of `device` (see the file comment).
[[nodiscard]] RequestStream request_stream(const CompactSnapshot& snap, int device);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/request_stream-inl.hpp"
#endif
