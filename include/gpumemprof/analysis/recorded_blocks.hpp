// Analysis layer: the block bytes a recorded run held, read from its trace's own addresses in one
// pass -- PyTorch's allocated_bytes (max_memory_allocated) as the run had it, with no allocator
// replaying the requests. (analysis/snapshot_replay.hpp answers another question: what would our
// policy, or another config, have done with the same requests.)
//
// A trace entry carries the requested bytes, not the block's. The block an `alloc` took starts at
// its address and holds the rounded request, unless the free block it was cut from was too small
// to split (docs/pytorch-compat.md, "Finding, splitting and merging blocks"): then it holds that
// whole free block. Free neighbours of a segment are always merged, so that free block reached
// from the address to the next block still active (allocated, or pending free on another
// stream's events) in the same segment, or to the segment's end. Expandable segments are bounded
// by their mapped pages (segment_map / segment_unmap), and their blocks split like small ones.
// The level follows memory_stats: up at `alloc`, down at `free_requested`.
// A trace that starts mid-run (a full history ring): the segments and live blocks before it are the
// replay's seed (the end state with the trace undone; a block freed but never allocated in the
// trace has its size estimated from its requested bytes, and in a large segment a gap of 1 MiB or
// less after it added, as PyTorch never splits one off), and refused where the replay refuses.
// The policy is PyTorch's default one (rounding, split rules), as the replay's is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/analysis/trace_start.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The allocated block bytes over one device's trace (see the file comment).
class RecordedBlocks {
 public:
  /// Starts at the state before `snap`'s trace of `device` (throws FormatError where the replay's
  /// seed is refused: memory in expandable segments older than the trace).
  template <SnapshotLike S>
  RecordedBlocks(const S& snap, int device) {
    for (const detail::SeedSegment& s : detail::reconstruct_start(snap, device, seed_)) {
      if (s.total_size != 0) segments_[s.address] = Segment{s.total_size, false};
      for (auto it = s.blocks.begin(); it != s.blocks.end(); ++it) {
        // A free block of the large pool always exceeds 1 MiB (its blocks and split-off rests do),
        // so a gap of 1 MiB or less after a block is the block's own unsplit rest.
        const auto next = std::next(it);
        const std::uint64_t limit = next != s.blocks.end() ? next->first : s.address + s.total_size;
        std::uint64_t size = it->second;
        if (s.is_large && limit > it->first + size && limit - it->first - size <= kSmallSize) size = limit - it->first;
        blocks_[it->first] = Block{size, true};
        allocated_ += static_cast<std::int64_t>(size);
      }
    }
    peak_ = allocated_;
    expandable_.expandable_segments = true;
  }

  /// Applies one trace entry.
  template <class Entry>
  void apply(const Entry& e) {
    switch (e.action) {
      case TraceAction::alloc: allocate(e.addr, e.size); break;
      case TraceAction::free_requested:
        if (const auto it = blocks_.find(e.addr); it != blocks_.end() && it->second.allocated) {
          it->second.allocated = false;
          allocated_ -= static_cast<std::int64_t>(it->second.size);
        }
        break;
      case TraceAction::free_completed:
        if (const auto it = blocks_.find(e.addr); it != blocks_.end()) {
          if (it->second.allocated) allocated_ -= static_cast<std::int64_t>(it->second.size);
          blocks_.erase(it);
        }
        break;
      case TraceAction::segment_alloc: segments_[e.addr] = Segment{e.size, false}; break;
      case TraceAction::segment_free: segments_.erase(e.addr); break;
      case TraceAction::segment_map: map(e.addr, e.size); break;
      case TraceAction::segment_unmap: unmap(e.addr, e.size); break;
      default: break;
    }
  }

  /// The blocks after every entry of `snap`'s trace of `device` (which must exist).
  template <SnapshotLike S>
  [[nodiscard]] static RecordedBlocks of_trace(const S& snap, int device) {
    RecordedBlocks blocks(snap, device);
    for (const auto& e : snap.device_traces[static_cast<std::size_t>(device)]) blocks.apply(e);
    return blocks;
  }

  /// What existed before the trace (nothing when it starts with the run).
  [[nodiscard]] const ReplaySeed& seed() const noexcept { return seed_; }
  /// Allocated block bytes now, and the most since the trace's start (its start included).
  [[nodiscard]] std::int64_t allocated() const noexcept { return allocated_; }
  [[nodiscard]] std::int64_t peak() const noexcept { return peak_; }

 private:
  struct Segment {
    std::uint64_t size;
    bool expandable;
  };
  struct Block {
    std::uint64_t size;
    bool allocated;  // false: free requested, pending its events (still bounds the free space)
  };

  // The segment holding `addr`, or end().
  std::map<std::uint64_t, Segment>::iterator segment_of(std::uint64_t addr) {
    auto it = segments_.upper_bound(addr);
    if (it == segments_.begin()) return segments_.end();
    --it;
    return addr < it->first + it->second.size ? it : segments_.end();
  }

  void allocate(std::uint64_t addr, std::uint64_t requested) {
    const std::uint64_t rounded = round_size(requested, default_);
    std::uint64_t block = rounded;
    if (const auto seg = segment_of(addr); seg != segments_.end()) {
      std::uint64_t end = seg->first + seg->second.size;
      if (const auto next = blocks_.upper_bound(addr); next != blocks_.end()) end = std::min(end, next->first);
      const std::uint64_t free_bytes = end - addr;
      const AllocatorConfig& cfg = seg->second.expandable ? expandable_ : default_;
      if (free_bytes > rounded && !should_split(free_bytes, rounded, is_small_size(rounded), cfg)) block = free_bytes;
    }
    if (const auto old = blocks_.find(addr); old != blocks_.end() && old->second.allocated) {
      allocated_ -= static_cast<std::int64_t>(old->second.size);  // its free is missing from the trace
    }
    blocks_[addr] = Block{block, true};
    allocated_ += static_cast<std::int64_t>(block);
    peak_ = std::max(peak_, allocated_);
  }

  // Mapped pages extend the expandable segment they follow, else start one.
  void map(std::uint64_t addr, std::uint64_t size) {
    if (const auto seg = segment_of(addr - 1);
        addr != 0 && seg != segments_.end() && seg->second.expandable && seg->first + seg->second.size == addr) {
      seg->second.size += size;
      return;
    }
    segments_[addr] = Segment{size, true};
  }

  void unmap(std::uint64_t addr, std::uint64_t size) {
    const auto seg = segment_of(addr);
    if (seg == segments_.end()) return;
    const std::uint64_t start = seg->first;
    const std::uint64_t end = start + seg->second.size;
    const std::uint64_t cut_end = std::min(end, addr + size);
    const bool expandable = seg->second.expandable;
    segments_.erase(seg);
    if (addr > start) segments_[start] = Segment{addr - start, expandable};
    if (cut_end < end) segments_[cut_end] = Segment{end - cut_end, expandable};
  }

  ReplaySeed seed_;
  AllocatorConfig default_;
  AllocatorConfig expandable_;
  std::map<std::uint64_t, Segment> segments_;  // address -> segment (mapped range when expandable)
  std::map<std::uint64_t, Block> blocks_;      // active blocks, by address
  std::int64_t allocated_ = 0;
  std::int64_t peak_ = 0;
};

/// A snapshot's peak allocated bytes on `device` -- block bytes, PyTorch's allocated_bytes.all.peak
/// (max_memory_allocated) -- the one definition behind summary, the HTML report, diff and the
/// cross-rank report. With a trace: the block bytes the recorded run held (RecordedBlocks: for
/// PyTorch's reference snapshot PyTorch's own figure, which a replay on the default policy only
/// approximates); without one: the bytes of the blocks allocated in the segments. nullopt,
/// with the reason in `why`, when the trace's start cannot be rebuilt.
template <SnapshotLike S>
[[nodiscard]] std::optional<std::uint64_t> snapshot_peak_allocated(const S& snap, int device,
                                                                   std::string* why = nullptr) {
  if (device < 0 || static_cast<std::size_t>(device) >= snap.device_traces.size() ||
      snap.device_traces[static_cast<std::size_t>(device)].empty()) {
    std::uint64_t live = 0;
    for (const SnapshotSegment& seg : snap.segments) {
      if (seg.device != device) continue;
      for (const SnapshotBlock& b : seg.blocks) live += b.state == BlockState::active_allocated ? b.size : 0;
    }
    return live;
  }
  try {
    return static_cast<std::uint64_t>(RecordedBlocks::of_trace(snap, device).peak());
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

/// The run's peak of allocated bytes (max_memory_allocated: block bytes, the figure the profiler's
/// summary and the tracker report), one line per traced device, as snapshot_peak_allocated reads
/// it. "n/a" with the reason when the trace's start cannot be rebuilt.
template <SnapshotLike S>
[[nodiscard]] std::string format_peak_allocated(const S& snap) {
  std::string out;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (snap.device_traces[d].empty()) continue;
    out += "peak allocated, device " + std::to_string(d) + ": ";
    try {
      const RecordedBlocks blocks = RecordedBlocks::of_trace(snap, static_cast<int>(d));
      const auto peak = static_cast<std::uint64_t>(blocks.peak());
      out += format_size(peak) + " = " + std::to_string(peak) + " bytes (the blocks its trace recorded" +
             (blocks.seed().any() ? "; it starts mid-run, so its start was rebuilt from the segments: approximate)"
                                  : ")") +
             "\n";
    } catch (const std::exception& e) {
      out += std::string("n/a (") + e.what() + ")\n";
    }
  }
  return out;
}

GPUMEMPROF_NAMESPACE_END
