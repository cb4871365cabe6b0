// Layer 5: what a snapshot says at a glance -- segments, fragmentation (the one definition of
// analysis/memory_facts.hpp), the largest free block, the trace's event counts, and the allocation sites holding the
// most live memory. Backs `gpumemprof summary SNAPSHOT`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/analysis/user_frame.hpp"  // the rule that names each site
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One allocation site: the live blocks whose allocation stack is the same.
struct SiteUsage {
  Frames frames;                 ///< the stack (nullptr: no stack recorded)
  std::uint64_t live_bytes = 0;  ///< block bytes of its active_allocated blocks
  std::uint64_t requested_bytes = 0;
  std::uint64_t blocks = 0;
};

/// One memory pool's segments (segment_pool_id): the default pool, a graph's, a MemPool's.
struct PoolUsage {
  MempoolId id;
  std::uint64_t segments = 0;
  std::uint64_t reserved = 0;   ///< bytes of its segments
  std::uint64_t allocated = 0;  ///< bytes of its active_allocated blocks
};

/// Whole-snapshot numbers (bytes unless noted).
struct SnapshotSummary {
  std::uint64_t segments = 0, large_segments = 0, small_segments = 0, expandable_segments = 0;
  /// Bytes and blocks summed over the segments: reserved, allocated and requested (live blocks),
  /// pending free, free, the largest free block, fragmentation (analysis/memory_facts.hpp).
  SegmentFacts usage;
  std::array<std::uint64_t, 9> trace_actions{};  ///< entries per TraceAction, all devices
  std::uint64_t annotations = 0;
  std::vector<SiteUsage> sites;  ///< by live bytes, largest first
  std::vector<PoolUsage> pools;  ///< per pool, in order of first segment
};

/// What `snap` says at a glance (a Snapshot or a CompactSnapshot).
template <SnapshotLike S>
[[nodiscard]] SnapshotSummary summarize(const S& snap);

/// The summary as text, with the `top` largest sites.
[[nodiscard]] std::string format_summary(const SnapshotSummary& s, std::size_t top = 10);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/reports.cpp, summarize
// for Snapshot and CompactSnapshot).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/reports/snapshot_summary-inl.hpp"
#endif
