// Layer 3: a window of a snapshot's history as a smaller snapshot that PyTorch's viewer opens.
//
// A slice's device_traces hold only the entries inside the window; its segments and blocks are
// the state at the END of the window, so that replaying the trace backwards from them (as the
// viewer does) is consistent and blocks live at the start of the window appear as pre-existing.
// The state at the window's end is the snapshot's state with the entries after the window undone,
// newest first: an alloc undone frees its block, a free_completed undone brings back its block
// (pending free; its size is the request rounded up to 512 bytes, the allocator's smallest
// block, when the snapshot's layout does not tell it), a segment_alloc undone removes the
// segment, a segment_free undone brings it back whole and free. Entries of expandable segments
// (segment_map/unmap) and frees of addresses found in no segment cannot be undone exactly; they
// are counted in SliceResult::approximate.
// Category changes (Snapshot::category_changes) inside the window stay, renumbered for the kept
// entries; those after it are undone with the entries (the block gets back its previous
// category), so blocks live at the window's end show the category they had then, and blocks
// live at its start keep theirs (a freed block regains the category its free carries).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Which entries a slice keeps: those with t0 <= time_us <= t1, and of those the newest
/// `max_entries` of each device's trace (0: no limit).
struct SliceWindow {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::min();
  std::int64_t t1 = std::numeric_limits<std::int64_t>::max();
  std::size_t max_entries = 0;
  /// Per device index: keep its entries [first, second) instead of those inside [t0, t1] --
  /// exact where entries share a microsecond (steps of a short loop).
  std::map<int, std::pair<std::size_t, std::size_t>> entries = {};
};

struct SliceResult {
  Snapshot snapshot;
  std::size_t entries = 0;      ///< trace entries kept, all devices
  std::size_t undone = 0;       ///< entries after the window, undone to find the state at its end
  std::size_t approximate = 0;  ///< of those, entries that could not be undone exactly
};

namespace detail {

/// The segments of one device by address, rewound entry by entry.
class SegmentRewinder {
 public:
  explicit SegmentRewinder(std::vector<SnapshotSegment> segs) {
    for (SnapshotSegment& s : segs) segs_.emplace(s.address, std::move(s));
  }

  /// Undoes one category change; false when its block is not live.
  bool undo(const CategoryChange& c) {
    auto [s, i] = find(c.addr);
    if (s == nullptr || s->blocks[i].address != c.addr || s->blocks[i].state == BlockState::inactive) return false;
    s->blocks[i].category = c.previous;
    return true;
  }

  /// Undoes one entry; false when it could not be undone exactly.
  template <class Entry>
  bool undo(const Entry& e, int device) {
    switch (e.action) {
      case TraceAction::alloc: return set_state(e.addr, BlockState::inactive, 0);
      case TraceAction::free_requested:
        return set_state(e.addr, BlockState::active_allocated, e.size, category_of_metadata(e.user_metadata));
      case TraceAction::free_completed: return bring_back(e.addr, e.size, category_of_metadata(e.user_metadata));
      case TraceAction::segment_alloc: return segs_.erase(e.addr) == 1;
      case TraceAction::segment_free: {
        SnapshotSegment s;
        s.device = device;
        s.address = e.addr;
        s.total_size = e.size;
        s.stream = e.stream;
        s.is_large = e.size != kSmallSegment;
        s.blocks.push_back(SnapshotBlock{e.addr, e.size, 0, BlockState::inactive, {}});
        return segs_.emplace(e.addr, std::move(s)).second;
      }
      case TraceAction::segment_map:
      case TraceAction::segment_unmap: return false;
      case TraceAction::snapshot:
      case TraceAction::oom:
      case TraceAction::category_change: return true;
    }
    return true;
  }

  /// The segments in address order, free neighbours merged and the totals recomputed.
  std::vector<SnapshotSegment> take() && {
    std::vector<SnapshotSegment> out;
    for (auto& [addr, s] : segs_) {
      std::vector<SnapshotBlock> blocks;
      for (SnapshotBlock& b : s.blocks) {
        if (!blocks.empty() && b.state == BlockState::inactive && blocks.back().state == BlockState::inactive) {
          blocks.back().size += b.size;
        } else {
          blocks.push_back(std::move(b));
        }
      }
      s.blocks = std::move(blocks);
      s.allocated_size = s.active_size = s.requested_size = 0;
      for (const SnapshotBlock& b : s.blocks) {
        if (b.state == BlockState::inactive) continue;
        if (b.state == BlockState::active_allocated) s.allocated_size += b.size;
        s.active_size += b.size;
        s.requested_size += b.requested_size;
      }
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  static constexpr std::uint64_t kSmallSegment = std::uint64_t{2} << 20;  // the small pool's segments
  static constexpr std::uint64_t kMinBlock = 512;

  /// The segment holding `addr` and the index of its block holding it, or {nullptr, 0}.
  std::pair<SnapshotSegment*, std::size_t> find(std::uint64_t addr) {
    auto it = segs_.upper_bound(addr);
    if (it == segs_.begin()) return {nullptr, 0};
    SnapshotSegment& s = std::prev(it)->second;
    if (addr >= s.address + s.total_size) return {nullptr, 0};
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      if (addr < s.blocks[i].address + s.blocks[i].size) return {&s, i};
    }
    return {nullptr, 0};
  }

  bool set_state(std::uint64_t addr, BlockState state, std::uint64_t requested, std::string_view category = {}) {
    auto [s, i] = find(addr);
    if (s == nullptr || s->blocks[i].address != addr) return false;
    SnapshotBlock& b = s->blocks[i];
    if (state == BlockState::inactive) b.frames.reset();
    if (state != BlockState::inactive && b.state == BlockState::inactive) return false;
    b.state = state;
    b.requested_size = state == BlockState::inactive ? 0 : requested;
    b.category = state == BlockState::inactive ? std::string() : std::string(category);
    return true;
  }

  /// Before a free_completed, the block at `addr` was pending free: carve it out of the free
  /// block that now holds it.
  bool bring_back(std::uint64_t addr, std::uint64_t requested, std::string_view category) {
    auto [s, i] = find(addr);
    if (s == nullptr) return false;
    SnapshotBlock free_block = s->blocks[i];
    if (free_block.state != BlockState::inactive) {
      if (free_block.address != addr) return false;
      s->blocks[i].state = BlockState::active_pending_free;
      s->blocks[i].requested_size = requested;
      s->blocks[i].category = std::string(category);
      return true;
    }
    // The free neighbours (undone allocs are not merged as they are undone) are one free range.
    std::size_t lo = i;
    std::size_t hi = i + 1;
    while (lo > 0 && s->blocks[lo - 1].state == BlockState::inactive) --lo;
    while (hi < s->blocks.size() && s->blocks[hi].state == BlockState::inactive) ++hi;
    free_block.address = s->blocks[lo].address;
    const std::uint64_t end = s->blocks[hi - 1].address + s->blocks[hi - 1].size;
    const std::uint64_t rounded =
        requested < kMinBlock ? kMinBlock : (requested + kMinBlock - 1) / kMinBlock * kMinBlock;
    const std::uint64_t size = std::min(rounded, end - addr);
    std::vector<SnapshotBlock> parts;
    if (addr > free_block.address) {
      parts.push_back(SnapshotBlock{free_block.address, addr - free_block.address, 0, BlockState::inactive, {}});
    }
    parts.push_back(SnapshotBlock{addr, size, requested, BlockState::active_pending_free, {}, std::string(category)});
    if (addr + size < end) parts.push_back(SnapshotBlock{addr + size, end - addr - size, 0, BlockState::inactive, {}});
    s->blocks.erase(s->blocks.begin() + static_cast<std::ptrdiff_t>(lo),
                    s->blocks.begin() + static_cast<std::ptrdiff_t>(hi));
    s->blocks.insert(s->blocks.begin() + static_cast<std::ptrdiff_t>(lo), parts.begin(), parts.end());
    return size == rounded;
  }

  std::map<std::uint64_t, SnapshotSegment> segs_;
};

}  // namespace detail

/// The slice of `snap` that `w` selects (see the file comment). Only the kept entries are
/// expanded into TraceEntry values; annotations among the kept entries stay (placed by
/// trace_index where the snapshot has it, else inside the kept time span).
template <SnapshotLike S>
SliceResult slice_snapshot(const S& snap, const SliceWindow& w) {
  SliceResult r;
  std::vector<detail::SegmentRewinder> rewinders;
  std::int64_t kept_first = std::numeric_limits<std::int64_t>::max();
  std::int64_t kept_last = std::numeric_limits<std::int64_t>::min();
  std::vector<std::pair<std::size_t, std::size_t>> kept_entries;  // per device: [first, last)
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    const auto& trace = snap.device_traces[d];
    std::size_t first = 0;
    std::size_t last = 0;  // one past the window
    if (const auto by_index = w.entries.find(static_cast<int>(d)); by_index != w.entries.end()) {
      last = std::min(by_index->second.second, static_cast<std::size_t>(trace.size()));
      first = std::min(by_index->second.first, last);
    } else {
      while (first < trace.size() && trace[first].time_us < w.t0) ++first;
      last = first;
      while (last < trace.size() && trace[last].time_us <= w.t1) ++last;
    }
    if (w.max_entries != 0 && last - first > w.max_entries) first = last - w.max_entries;
    kept_entries.resize(d + 1, {0, 0});
    kept_entries[d] = {first, last};

    std::vector<SnapshotSegment> mine;
    for (const SnapshotSegment& s : snap.segments) {
      if (s.device == static_cast<int>(d)) mine.push_back(s);
    }
    detail::SegmentRewinder rewinder(std::move(mine));
    // Category changes: those in the window are kept, those after it undone with the entries.
    const std::vector<CategoryChange>& changes = category_changes_of(snap, static_cast<std::int64_t>(d));
    const auto kept_change = [&](const CategoryChange& c) {
      return c.trace_index >= first && c.trace_index <= last && c.time_us >= w.t0 && c.time_us <= w.t1;
    };
    std::size_t k = changes.size();  // changes not yet undone: [0, k)
    const auto undo_changes_from = [&](std::size_t index) {
      for (; k > 0 && changes[k - 1].trace_index >= index && !kept_change(changes[k - 1]); --k) {
        if (!rewinder.undo(changes[k - 1])) ++r.approximate;
      }
    };
    for (std::size_t i = trace.size(); i > last; --i) {
      undo_changes_from(i);
      ++r.undone;
      if (!rewinder.undo(trace[i - 1], static_cast<int>(d))) ++r.approximate;
    }
    undo_changes_from(last);
    std::vector<SnapshotSegment> segs = std::move(rewinder).take();
    r.snapshot.segments.insert(r.snapshot.segments.end(), std::make_move_iterator(segs.begin()),
                               std::make_move_iterator(segs.end()));

    std::vector<TraceEntry> kept;
    kept.reserve(last - first);
    for (std::size_t i = first; i < last; ++i) {
      const auto e = trace[i];
      kept.push_back(
          TraceEntry{e.action, e.addr, e.size, e.stream, e.time_us, e.compile_context, e.user_metadata, e.frames});
    }
    if (!kept.empty()) {
      kept_first = std::min(kept_first, kept.front().time_us);
      kept_last = std::max(kept_last, kept.back().time_us);
    }
    r.entries += kept.size();
    r.snapshot.device_traces.push_back(std::move(kept));
    std::vector<CategoryChange> kept_changes;
    for (const CategoryChange& c : changes) {
      if (!kept_change(c)) continue;
      kept_changes.push_back(c);
      kept_changes.back().trace_index -= first;
    }
    if (!kept_changes.empty()) {
      r.snapshot.category_changes.resize(d + 1);
      r.snapshot.category_changes[d] = std::move(kept_changes);
    }
  }
  // Segments of devices with no trace stay as they are.
  for (const SnapshotSegment& s : snap.segments) {
    if (s.device < 0 || static_cast<std::size_t>(s.device) >= snap.device_traces.size()) {
      r.snapshot.segments.push_back(s);
    }
  }
  r.snapshot.allocator_settings = snap.allocator_settings;
  for (const Annotation& a : snap.external_annotations) {
    const auto d = static_cast<std::size_t>(a.device);
    if (a.trace_index >= 0 && d < kept_entries.size()) {  // placed by the recorder: by its place
      const auto [first, last] = kept_entries[d];
      const auto at = static_cast<std::size_t>(a.trace_index);
      // Kept when it falls among the kept entries: a START before one of them (the first
      // included), an END after one of them (the last included).
      if (a.start ? (at < first || at >= last) : (at <= first || at > last)) continue;
      Annotation kept = a;
      kept.trace_index = static_cast<std::int64_t>(at - first);
      r.snapshot.external_annotations.push_back(std::move(kept));
    } else if (a.time_us >= kept_first && a.time_us <= kept_last) {
      Annotation kept = a;
      kept.trace_index = -1;
      r.snapshot.external_annotations.push_back(std::move(kept));
    }
  }
  r.snapshot.rank_info = snap.rank_info;
  return r;
}

GPUMEMPROF_NAMESPACE_END
