// Layer 5: what the offline HTML report shows, computed once in C++ so the page only draws.
//
// Map of the model (one HtmlDevice per device that has a trace or segments):
//   states   -- state s is the memory after the first s trace entries of the device (0..E).
//   allocations -- one interval [start, end) of states per allocation: live from the state after
//               its `alloc` entry up to the state after its `free_completed` entry. Allocations
//               made before the (ring-buffered) trace began start at state 0; those still live at
//               the end end at E + 1. Active blocks of the snapshot's segments that the trace never
//               mentions are such whole-range allocations. Sorted by start, so rank = stack order.
//   stacks   -- every distinct frame list interned once (strings -> frames -> stacks); entries
//               and blocks refer to a stack id, -1 meaning "no frames recorded".
//   summary  -- the numbers at the top of the page (peaks, counts, fragmentation).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// Flags of an HtmlAllocation.
inline constexpr std::uint8_t kHtmlAllocBeforeTrace = 1;  ///< its `alloc` precedes the trace
inline constexpr std::uint8_t kHtmlAllocLiveAtEnd = 2;    ///< not freed when the trace ends
inline constexpr std::uint8_t kHtmlAllocPendingFree = 4;  ///< free requested, not completed at the end

/// One allocation's lifetime in states (see the map above).
struct HtmlAllocation {
  std::uint64_t start = 0;  ///< first state in which it is live
  std::uint64_t end = 0;    ///< first state in which it is no longer live
  std::uint64_t size = 0;   ///< requested bytes
  std::uint64_t addr = 0;
  std::int32_t stack = -1;  ///< allocation stack id, -1 = none
  std::uint8_t flags = 0;
};

/// A segment of the snapshot; its blocks are blocks[first_block, first_block + num_blocks).
struct HtmlSegment {
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t stream = 0;
  bool is_large = true;
  bool is_expandable = false;
  std::int32_t stack = -1;
  std::size_t first_block = 0;
  std::size_t num_blocks = 0;
  MempoolId pool;  ///< segment_pool_id: (0, 0) the default pool, else a graph's or a MemPool's
};

struct HtmlBlock {
  std::uint64_t offset = 0;  ///< from the segment's address
  std::uint64_t size = 0;
  std::uint64_t requested = 0;
  BlockState state = BlockState::inactive;
  std::int32_t stack = -1;
};

/// An external annotation of the device, time relative to the trace's first entry.
struct HtmlAnnotation {
  std::int32_t name = 0;  ///< string id
  bool start = true;
  std::int64_t time_us = 0;
};

/// The page's headline numbers for one device (bytes unless noted).
struct HtmlSummary {
  std::uint64_t num_events = 0;          ///< trace entries shown
  std::uint64_t num_dropped_events = 0;  ///< older entries left out (max_trace_entries)
  std::uint64_t num_allocs = 0;          ///< `alloc` entries
  std::uint64_t num_frees = 0;           ///< `free_completed` entries
  std::uint64_t num_ooms = 0;
  std::uint64_t num_segment_events = 0;
  std::int64_t duration_us = 0;
  /// Of kActivitySlices equal slices of the trace's time span, those holding an event (see
  /// opens_on_events); 0 when every event has the same time.
  std::uint32_t active_slices = 0;
  /// The page opens on the events axis (event index), not wall-clock time: the span is mostly idle.
  bool opens_on_events = false;
  /// The highest of the timeline's levels (analysis/timeline.hpp names them): requested (PyTorch's
  /// requested_bytes, alloc -> free_completed), at state peak_requested_state; requested_in_use
  /// (alloc -> free_requested).
  std::uint64_t peak_requested_bytes = 0;
  std::uint64_t peak_requested_state = 0;
  std::uint64_t peak_requested_in_use_bytes = 0;
  /// Block bytes (PyTorch's allocated, max_memory_allocated) by the one definition
  /// (snapshot_peak_allocated, the whole trace); nullopt when the trace cannot be replayed.
  std::optional<std::uint64_t> peak_allocated_bytes;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t reserved_start_bytes = 0;  ///< reserved before the first entry (reconstructed)
  // From the snapshot's segments (the state when the snapshot was taken).
  std::uint64_t num_segments = 0;
  std::uint64_t num_blocks = 0;
  /// Bytes and blocks summed over the device's segments (analysis/memory_facts.hpp).
  SegmentFacts usage;
};

/// What the page's level of detail did to a device too long to embed whole
/// (html_report_lod.hpp). When `applied`, the device's states, times, allocations, reserved
/// changes and OOMs are in page states: page state j shows the trace's state state_event[j].
struct HtmlLevelOfDetail {
  struct Site {  ///< one stack's allocations, over the whole trace
    std::int32_t stack = -1;
    std::uint64_t count = 0;
    std::uint64_t total = 0;    ///< bytes allocated
    std::uint64_t live = 0;     ///< bytes still live at the end
    std::uint64_t peak = 0;     ///< bytes live at the peak
    std::uint64_t largest = 0;  ///< the largest allocation
  };
  bool applied = false;
  std::uint64_t events = 0;                // trace entries the page states stand for
  std::vector<std::uint64_t> state_event;  ///< per page state: the trace's state it shows
  std::vector<std::uint64_t> active;       ///< per page state: active bytes, all allocations
  std::uint64_t allocations = 0;           ///< allocations in the trace
  std::uint64_t live_at_end = 0;           ///< of those, live at the end
  std::uint64_t hidden = 0;                ///< allocations not drawn on their own (summed)
  std::vector<Site> sites;
};

struct HtmlDevice {
  int device = 0;
  std::string name;                 ///< "cuda:0", "sim:1" (what the device picker shows)
  std::int64_t t0_us = 0;           ///< time of the first trace entry shown
  std::vector<std::int64_t> times;  ///< per entry, relative to t0, made nondecreasing
  std::vector<HtmlAllocation> allocations;
  std::vector<std::pair<std::uint64_t, std::int64_t>> reserved_changes;  ///< (state, delta bytes)
  std::vector<std::uint64_t> ooms;                                       ///< entry indices
  std::vector<HtmlAnnotation> annotations;
  std::vector<HtmlSegment> segments;
  std::vector<HtmlBlock> blocks;
  HtmlSummary summary;
  HtmlLevelOfDetail lod;
};

/// Interns frame lists: equal stacks (by pointer first, then by content) get one id.
class HtmlStackTable {
 public:
  struct FrameRef {
    std::int32_t file = 0;  ///< string id
    std::int64_t line = 0;
    std::int32_t name = 0;  ///< string id
  };

  std::int32_t intern(const Frames& frames) {
    if (!frames || frames->empty()) return -1;
    if (const auto it = by_pointer_.find(frames.get()); it != by_pointer_.end()) return it->second;
    std::vector<std::int32_t> ids;
    ids.reserve(frames->size());
    for (const Frame& f : *frames) ids.push_back(intern_frame(f));
    const auto [it, added] = by_content_.try_emplace(ids, static_cast<std::int32_t>(stacks_.size()));
    if (added) stacks_.push_back(std::move(ids));
    by_pointer_.emplace(frames.get(), it->second);
    keep_alive_.push_back(frames);  // the pointer key must not be reused by a new list
    return it->second;
  }

  std::int32_t intern_string(std::string_view s) {
    const auto [it, added] = strings_index_.try_emplace(std::string(s), static_cast<std::int32_t>(strings_.size()));
    if (added) strings_.emplace_back(s);
    return it->second;
  }

  [[nodiscard]] const std::vector<std::string>& strings() const noexcept { return strings_; }
  [[nodiscard]] const std::vector<FrameRef>& frames() const noexcept { return frames_; }
  [[nodiscard]] const std::vector<std::vector<std::int32_t>>& stacks() const noexcept { return stacks_; }

 private:
  std::int32_t intern_frame(const Frame& f) {
    std::string key;
    key.reserve(f.filename.size() + f.name.size() + 24);
    key.append(f.filename).push_back('\0');
    key.append(std::to_string(f.line)).push_back('\0');
    key.append(f.name);
    const auto [it, added] = frames_index_.try_emplace(std::move(key), static_cast<std::int32_t>(frames_.size()));
    if (added) frames_.push_back({intern_string(f.filename), f.line, intern_string(f.name)});
    return it->second;
  }

  std::vector<std::string> strings_;
  std::unordered_map<std::string, std::int32_t> strings_index_;
  std::vector<FrameRef> frames_;
  std::unordered_map<std::string, std::int32_t> frames_index_;
  std::vector<std::vector<std::int32_t>> stacks_;
  std::map<std::vector<std::int32_t>, std::int32_t> by_content_;
  std::unordered_map<const void*, std::int32_t> by_pointer_;
  std::vector<Frames> keep_alive_;
};

struct HtmlModel {
  std::vector<HtmlDevice> devices;
  HtmlStackTable stacks;
};

namespace html_model {

[[nodiscard]] inline bool is_segment_grow(TraceAction a) noexcept {
  return a == TraceAction::segment_alloc || a == TraceAction::segment_map;
}
[[nodiscard]] inline bool is_segment_shrink(TraceAction a) noexcept {
  return a == TraceAction::segment_free || a == TraceAction::segment_unmap;
}

/// The trace's time span is cut into this many equal slices...
inline constexpr std::uint32_t kActivitySlices = 100;
/// ...and when its events fall in fewer than this many, wall-clock time is mostly idle (a pause
/// between runs, a step every few minutes): a time axis would squeeze the activity into a few
/// pixels, so the page opens on the events axis instead, and says why.
inline constexpr std::uint32_t kBusySlices = 20;

/// The slices of the span of `times` (nondecreasing) that hold at least one event.
[[nodiscard]] inline std::uint32_t active_slices(const std::vector<std::int64_t>& times) {
  if (times.empty() || times.back() <= times.front()) return 0;
  const auto span = static_cast<double>(times.back() - times.front());
  std::uint32_t count = 0, last = kActivitySlices;  // no slice yet
  for (const std::int64_t t : times) {
    const auto slice = std::min<std::uint32_t>(
        kActivitySlices - 1,
        static_cast<std::uint32_t>(static_cast<double>(t - times.front()) / span * kActivitySlices));
    count += slice != last ? 1 : 0;
    last = slice;
  }
  return count;
}

/// Copies the device's segments and blocks, and fills the snapshot half of the summary.
template <SnapshotLike S>
void add_segments(const S& snap, HtmlDevice& dev, HtmlStackTable& stacks) {
  HtmlSummary& sum = dev.summary;
  for (const SnapshotSegment& seg : snap.segments) {
    if (seg.device != dev.device) continue;
    HtmlSegment out{seg.address,       seg.total_size,    seg.stream,
                    seg.is_large,      seg.is_expandable, stacks.intern(seg.frames),
                    dev.blocks.size(), seg.blocks.size(), seg.pool_id};
    for (const SnapshotBlock& b : seg.blocks) {
      const std::uint64_t offset = b.address >= seg.address ? b.address - seg.address : 0;
      dev.blocks.push_back({offset, b.size, b.requested_size, b.state, stacks.intern(b.frames)});
    }
    sum.usage += segment_facts(seg);
    ++sum.num_segments;
    sum.num_blocks += seg.blocks.size();
    dev.segments.push_back(out);
  }
}

/// Turns the device's trace (the newest `max_entries` entries; 0 = all) into allocations and
/// reserved-memory changes; blocks of the snapshot that are live but never allocated in the trace
/// become whole-range allocations.
template <SnapshotLike S>
void add_trace(const S& snap, std::size_t max_entries, HtmlDevice& dev, HtmlStackTable& stacks) {
  static const std::remove_cvref_t<decltype(snap.device_traces[0])> kNoTrace;
  const auto d = static_cast<std::size_t>(dev.device);
  const auto& all = d < snap.device_traces.size() ? snap.device_traces[d] : kNoTrace;
  const std::size_t first = max_entries != 0 && all.size() > max_entries ? all.size() - max_entries : 0;
  const std::uint64_t num_events = all.size() - first;
  HtmlSummary& sum = dev.summary;
  sum.num_events = num_events;
  sum.num_dropped_events = first;

  struct Open {
    std::size_t index;  // into dev.allocations
    bool free_requested;
  };
  std::unordered_map<std::uint64_t, Open> open;
  auto add_allocation = [&](HtmlAllocation a) {
    dev.allocations.push_back(a);
    return dev.allocations.size() - 1;
  };

  dev.times.reserve(num_events);
  {
    std::size_t allocs = 0;
    for (std::uint64_t i = 0; i < num_events; ++i) allocs += all[first + i].action == TraceAction::alloc ? 1 : 0;
    dev.allocations.reserve(allocs);
  }
  dev.t0_us = num_events != 0 ? all[first].time_us : 0;
  std::int64_t last_time = 0;
  for (std::uint64_t i = 0; i < num_events; ++i) {
    const auto& e = all[first + i];
    last_time = std::max(last_time, e.time_us - dev.t0_us);
    dev.times.push_back(last_time);
    const std::uint64_t after = i + 1;  // the state this entry produces
    const auto size = static_cast<std::int64_t>(e.size);
    switch (e.action) {
      case TraceAction::alloc: {
        ++sum.num_allocs;
        if (const auto it = open.find(e.addr); it != open.end()) {  // its free is missing: end it here
          HtmlAllocation& old = dev.allocations[it->second.index];
          old.end = after;
          open.erase(it);
        }
        const std::size_t k = add_allocation({after, 0, e.size, e.addr, stacks.intern(e.frames), 0});
        open.emplace(e.addr, Open{k, false});
        break;
      }
      case TraceAction::free_requested: {
        auto it = open.find(e.addr);
        if (it == open.end()) {
          const std::size_t k = add_allocation({0, 0, e.size, e.addr, -1, kHtmlAllocBeforeTrace});
          it = open.emplace(e.addr, Open{k, false}).first;
        }
        it->second.free_requested = true;
        break;
      }
      case TraceAction::free_completed: {
        ++sum.num_frees;
        if (const auto it = open.find(e.addr); it != open.end()) {
          HtmlAllocation& a = dev.allocations[it->second.index];
          a.end = after;
          open.erase(it);
        } else {  // allocated and free-requested before the trace: active, not allocated
          add_allocation({0, after, e.size, e.addr, -1, kHtmlAllocBeforeTrace});
        }
        break;
      }
      case TraceAction::oom:
        ++sum.num_ooms;
        dev.ooms.push_back(i);
        break;
      case TraceAction::snapshot: break;
      default:
        if (is_segment_grow(e.action)) dev.reserved_changes.emplace_back(after, size);
        if (is_segment_shrink(e.action)) dev.reserved_changes.emplace_back(after, -size);
        ++sum.num_segment_events;
        break;
    }
  }
  sum.duration_us = dev.times.empty() ? 0 : dev.times.back();
  sum.active_slices = active_slices(dev.times);
  sum.opens_on_events = sum.active_slices < kBusySlices;  // also when there is no time span at all

  // Live blocks of the snapshot: those the trace allocated keep their interval (and lend their
  // stack when the entry had none); the others were allocated before the trace.
  const std::uint64_t end_state = num_events + 1;
  for (const HtmlSegment& seg : dev.segments) {
    for (std::size_t b = seg.first_block; b < seg.first_block + seg.num_blocks; ++b) {
      const HtmlBlock& blk = dev.blocks[b];
      if (blk.state == BlockState::inactive) continue;
      const std::uint64_t addr = seg.address + blk.offset;
      if (const auto it = open.find(addr); it != open.end()) {
        HtmlAllocation& a = dev.allocations[it->second.index];
        if (a.stack < 0) a.stack = blk.stack;
        continue;
      }
      const bool pending = blk.state == BlockState::active_pending_free;
      const std::uint64_t size = blk.requested != 0 ? blk.requested : blk.size;
      const std::size_t k = add_allocation({0, 0, size, addr, blk.stack, kHtmlAllocBeforeTrace});
      open.emplace(addr, Open{k, pending});
    }
  }
  for (const auto& [addr, o] : open) {
    HtmlAllocation& a = dev.allocations[o.index];
    a.end = end_state;
    a.flags |= kHtmlAllocLiveAtEnd;
    if (o.free_requested) a.flags |= kHtmlAllocPendingFree;
  }
  // In start order, stably: the trace's own allocations were added in start order already, so
  // only those from before the trace (start 0) move to the front (a copy of them, not of all).
  {
    std::vector<HtmlAllocation> before;
    for (const HtmlAllocation& a : dev.allocations) {
      if (a.start == 0) before.push_back(a);
    }
    std::size_t to = dev.allocations.size();
    for (std::size_t from = dev.allocations.size(); from-- > 0;) {
      if (dev.allocations[from].start != 0) dev.allocations[--to] = dev.allocations[from];
    }
    std::copy(before.begin(), before.end(), dev.allocations.begin());
  }

  // Peaks and the reserved level before the first entry shown: from the trace's timeline
  // (analysis/timeline.hpp), the reading every report shares.
  const TraceTimeline<S> timeline(snap, dev.device);
  TimelineLevels level = timeline.start();
  auto take = [&sum](const TimelineLevels& l, std::uint64_t state) {
    if (l.requested > static_cast<std::int64_t>(sum.peak_requested_bytes)) {
      sum.peak_requested_bytes = static_cast<std::uint64_t>(l.requested);
      sum.peak_requested_state = state;
    }
    sum.peak_requested_in_use_bytes = std::max(
        sum.peak_requested_in_use_bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(l.requested_in_use, 0)));
    sum.peak_reserved_bytes =
        std::max(sum.peak_reserved_bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(l.reserved, 0)));
  };
  if (first == 0) take(level, 0);
  timeline.walk([&](std::size_t i, const auto&, const TimelineLevels& l, const auto&) {
    if (i + 1 == first) {  // the state before the first entry shown
      level = l;
      take(l, 0);
    }
    if (i >= first) take(l, i + 1 - first);
  });
  sum.reserved_start_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(level.reserved, 0));
  sum.peak_reserved_bytes = std::max(sum.peak_reserved_bytes, sum.usage.reserved);

  if (num_events != 0) {
    for (const Annotation& a : snap.external_annotations) {
      if (a.device == dev.device)
        dev.annotations.push_back({stacks.intern_string(a.name), a.start, a.time_us - dev.t0_us});
    }
  }
}

}  // namespace html_model

/// The name of device `id` in `snap` ("sim:1" for a simulated device): from the snapshot's device
/// ledger or its rank's device, else "cuda:<id>" (PyTorch's snapshots are of CUDA devices).
template <SnapshotLike S>
[[nodiscard]] std::string snapshot_device_name(const S& snap, int id) {
  const auto same = [id](const std::string& name) {
    const auto colon = name.find(':');
    return colon != std::string::npos && name.substr(colon + 1) == std::to_string(id);
  };
  if constexpr (requires { snap.device_memory; }) {
    for (const auto& m : snap.device_memory)
      if (same(m.device)) return m.device;
  }
  if constexpr (requires { snap.rank_info; }) {
    if (same(snap.rank_info.device)) return snap.rank_info.device;
  }
  return "cuda:" + std::to_string(id);
}

/// Builds the report's model: one device per device index with a trace or segments.
/// `max_entries` keeps only the newest entries of each trace (0 = all).
template <SnapshotLike S>
[[nodiscard]] HtmlModel build_html_model(const S& snap, std::size_t max_entries = 0) {
  std::vector<int> ids;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d)
    if (!snap.device_traces[d].empty()) ids.push_back(static_cast<int>(d));
  for (const SnapshotSegment& seg : snap.segments) ids.push_back(seg.device);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) ids.push_back(0);  // an empty snapshot still gets a (blank) device

  HtmlModel model;
  for (const int id : ids) {
    HtmlDevice dev;
    dev.device = id;
    dev.name = snapshot_device_name(snap, id);
    html_model::add_segments(snap, dev, model.stacks);
    html_model::add_trace(snap, max_entries, dev, model.stacks);
    dev.summary.peak_allocated_bytes = snapshot_peak_allocated(snap, id);
    model.devices.push_back(std::move(dev));
  }
  return model;
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
