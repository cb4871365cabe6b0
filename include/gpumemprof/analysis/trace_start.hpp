// Analysis layer: what existed before the first event of a trace that starts mid-run (a full
// history ring keeps only the newest events): the end state (`segments`) with the trace undone --
// segments no segment_alloc in the trace created, blocks the trace frees without having allocated
// them (their block bytes estimated from the requested bytes), and active blocks of the end state
// the trace never allocated. The replay (snapshot_replay.hpp) seeds its allocator with them; the
// recorded block bytes (recorded_blocks.hpp) start from them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// What existed before the first event of a trace that starts mid-run.
struct ReplaySeed {
  std::size_t segments = 0;
  std::size_t blocks = 0;             ///< live blocks
  std::uint64_t reserved_bytes = 0;   ///< bytes of the seeded segments (as recorded)
  std::uint64_t allocated_bytes = 0;  ///< bytes of the seeded live blocks (estimated for freed ones)
  std::size_t estimated_blocks = 0;   ///< live blocks whose size was estimated from a free event
  std::size_t orphan_blocks = 0;      ///< freed blocks that lie in no known segment (seeded alone)
  bool exact_layout = true;           ///< every seeded segment came out at its recorded size
  [[nodiscard]] bool any() const noexcept { return segments != 0 || blocks != 0; }
};

namespace detail {

/// A segment as it was when the trace started, with its live blocks in address order.
struct SeedSegment {
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t stream = 0;
  bool is_large = true;
  std::map<std::uint64_t, std::uint64_t> blocks;     // address -> block bytes
  std::map<std::uint64_t, std::uint64_t> requested;  // address -> requested bytes
};

inline std::uint64_t round_block(std::uint64_t requested) noexcept {
  return requested < kMinBlockSize ? kMinBlockSize : (requested + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

/// Throws when memory in recorded expandable segments predates the trace (see the file comment):
/// pages mapped at the end that the trace did not map, pages it unmapped without mapping them, or
/// blocks in expandable segments that the trace did not allocate.
template <SnapshotLike S>
void refuse_older_expandable(const S& snap, int device, std::uint64_t mapped_by_trace, bool unmapped_older,
                             const std::unordered_map<std::uint64_t, std::uint64_t>& live,
                             const std::unordered_set<std::uint64_t>& freed_once) {
  std::uint64_t mapped_at_end = 0;
  std::size_t segments = 0;
  bool older_blocks = false;
  for (const SnapshotSegment& s : snap.segments) {
    if (s.device != device || !s.is_expandable) continue;
    ++segments;
    mapped_at_end += s.total_size;
    for (const SnapshotBlock& b : s.blocks) {
      older_blocks = older_blocks || (b.state != BlockState::inactive && live.count(b.address) == 0);
    }
    for (const std::uint64_t a : freed_once)
      older_blocks = older_blocks || (a >= s.address && a < s.address + s.total_size);
  }
  if (!unmapped_older && !older_blocks && mapped_at_end <= mapped_by_trace) return;
  throw FormatError("device_traces[" + std::to_string(device) +
                    "] starts mid-run (the history ring dropped its oldest events) and the memory before it lay in "
                    "expandable segments (" +
                    std::to_string(segments) + " at the end, " + std::to_string(mapped_at_end >> 20) +
                    " MiB mapped), which a replay cannot rebuild from the end state. Record the whole run "
                    "(torch.cuda.memory._record_memory_history(max_entries=N) with N above the run's event count, "
                    "or gpumemprof's HistoryOptions::max_entries) so the trace starts before the first allocation");
}

/// The state at the trace's start: the end state with the trace undone (see the file comment).
template <SnapshotLike S>
std::vector<SeedSegment> reconstruct_start(const S& snap, int device, ReplaySeed& seed) {
  const auto& trace = snap.device_traces[static_cast<std::size_t>(device)];
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // allocated by the trace and not freed
  std::unordered_set<std::uint64_t> freed_once;           // pre-existing blocks already freed
  std::map<std::uint64_t, std::uint64_t> pre_freed;       // address -> requested bytes
  std::unordered_set<std::uint64_t> trace_segments;       // created by the trace, still there
  std::map<std::uint64_t, SeedSegment> pre;               // address -> segment
  std::uint64_t mapped = 0;                               // expandable bytes the trace mapped, net
  bool unmapped_older = false;                            // it unmapped pages it had not mapped
  for (const auto& e : trace) {
    switch (e.action) {
      case TraceAction::segment_map: mapped += e.size; break;
      case TraceAction::segment_unmap:
        unmapped_older = unmapped_older || e.size > mapped;
        mapped -= std::min(mapped, e.size);
        break;
      case TraceAction::alloc: live[e.addr] = e.size; break;
      case TraceAction::free_requested:
      case TraceAction::free_completed:
        if (live.count(e.addr) != 0) {
          if (e.action == TraceAction::free_completed) live.erase(e.addr);
        } else if (freed_once.insert(e.addr).second) {
          pre_freed[e.addr] = e.size;
        }
        break;
      case TraceAction::segment_alloc: trace_segments.insert(e.addr); break;
      case TraceAction::segment_free:
        if (trace_segments.erase(e.addr) == 0 && pre.count(e.addr) == 0) {
          pre[e.addr] = SeedSegment{e.addr, e.size, e.stream, true, {}, {}};
        }
        break;
      default: break;
    }
  }
  refuse_older_expandable(snap, device, mapped, unmapped_older, live, freed_once);
  for (const SnapshotSegment& s : snap.segments) {
    if (s.device != device || trace_segments.count(s.address) != 0 || s.is_expandable) continue;
    SeedSegment seg{s.address, s.total_size, s.stream, s.is_large, {}, {}};
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == BlockState::inactive || live.count(b.address) != 0 || freed_once.count(b.address) != 0) continue;
      seg.blocks[b.address] = b.size;
      seg.requested[b.address] = b.requested_size;
    }
    pre[s.address] = std::move(seg);
  }
  // Blocks the trace freed without allocating: place each in the segment that holds it.
  std::vector<SeedSegment> out;
  for (auto& [addr, seg] : pre) out.push_back(std::move(seg));
  for (const auto& [addr, requested] : pre_freed) {
    SeedSegment* home = nullptr;
    for (SeedSegment& s : out) {
      if (addr >= s.address && addr < s.address + s.total_size) home = &s;
    }
    if (home == nullptr) {
      ++seed.orphan_blocks;
      SeedSegment alone{addr, 0, 0, requested > kSmallSize, {}, {}};
      alone.blocks[addr] = round_block(requested);
      alone.requested[addr] = requested;
      out.push_back(std::move(alone));
      continue;
    }
    // Segments freed by the trace carry no segment_type: a 2 MiB one holding small requests is small.
    if (home->total_size == kSmallBuffer && requested <= kSmallSize) home->is_large = false;
    home->blocks[addr] = round_block(requested);
    home->requested[addr] = requested;
    ++seed.estimated_blocks;
  }
  for (const SeedSegment& s : out) {
    seed.segments += s.total_size != 0 ? 1 : 0;
    seed.reserved_bytes += s.total_size;
    seed.blocks += s.blocks.size();
    for (const auto& [a, size] : s.blocks) seed.allocated_bytes += size;
  }
  return out;
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
