// Analysis layer: the one reading of a device trace into memory levels over time. Every report
// that draws memory over time (Perfetto counters, the HTML report, the category timeline) walks
// a TraceTimeline, so they agree on every curve.
//
// The levels, named as PyTorch names its numbers (allocated = block bytes, requested = the bytes
// asked for, reserved = segments; PYTORCH-COMPAT.md, the stats table). A trace entry carries the
// requested size only, so a trace gives no allocated (block) level:
//   requested        -- up at `alloc`, down at `free_completed`: PyTorch's requested_bytes (a
//                       block pending free on other streams' events still counts);
//   requested_in_use -- the same bytes, down at `free_requested` already: what the program holds
//                       (torch.profiler's memory timeline counts a tensor until it is freed);
//   reserved         -- segment bytes: up at segment_alloc/segment_map, down at segment_free/unmap.
// Every report takes these names and meanings from here (the HTML report's peakRequested,
// peakRequestedInUse and peakReserved; Perfetto's "requested" counter; `summary`'s peak requested).
// A trace may start late (a full ring drops the oldest events): the levels before its first entry
// are what the snapshot's segments hold at the end minus the trace's net change (never below 0).
//
// Categories (history/memory_category.hpp) split the requested_in_use level: an allocation's category is
// the one its `alloc` entry carries (or, failing that, what CategoryRules say of its frames and
// scopes: analysis/category_rules.hpp); its
// `free_requested` takes the bytes out of that same category. Allocations made before the trace
// count in the category their free carries.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/analysis/category_rules.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Memory levels at one moment (bytes; see the header comment).
struct TimelineLevels {
  std::int64_t requested_in_use = 0;  ///< requested bytes, alloc -> free_requested
  std::int64_t requested = 0;         ///< requested bytes, alloc -> free_completed (requested_bytes)
  std::int64_t reserved = 0;          ///< segment bytes (reserved_bytes)
  friend bool operator==(const TimelineLevels&, const TimelineLevels&) = default;
};

/// What one trace entry changes.
template <class Entry>
[[nodiscard]] TimelineLevels timeline_delta(const Entry& e) noexcept {
  const auto n = static_cast<std::int64_t>(e.size);
  switch (e.action) {
    case TraceAction::alloc: return {n, n, 0};
    case TraceAction::free_requested: return {-n, 0, 0};
    case TraceAction::free_completed: return {0, -n, 0};
    case TraceAction::segment_alloc:
    case TraceAction::segment_map: return {0, 0, n};
    case TraceAction::segment_free:
    case TraceAction::segment_unmap: return {0, 0, -n};
    default: return {};
  }
}

/// One device's trace read as levels over time (see the header comment).
template <SnapshotLike S>
class TraceTimeline {
 public:
  using Trace = std::remove_cvref_t<decltype(std::declval<const S&>().device_traces[0])>;
  using Entry = std::remove_cvref_t<decltype(*std::declval<const Trace&>().begin())>;
  /// Reads `device`'s trace of `snap` once, for the levels before it and the categories
  /// (`rules` name those of entries that carry none). `snap` must outlive the timeline.
  explicit TraceTimeline(const S& snap, int device, const CategoryRules* rules = nullptr) : trace_(trace_of(snap, device)) {
    if (rules != nullptr && !rules->empty()) {
      rules_ = *rules;
      rules_->set_scopes(snap.external_annotations, device);
    }
    categories_.emplace_back();  // index 0: unknown
    index_.emplace(std::string(), 0);
    TimelineLevels end;
    for (const SnapshotSegment& seg : snap.segments) {
      if (seg.device != device) continue;
      end.reserved += static_cast<std::int64_t>(seg.total_size);
      for (const SnapshotBlock& b : seg.blocks) {
        const auto n = static_cast<std::int64_t>(b.requested_size);
        if (b.state == BlockState::active_allocated) end.requested_in_use += n;
        if (b.state != BlockState::inactive) end.requested += n;
      }
    }
    // Categories cost a lookup per allocation: only when some entry carries one (or rules may).
    tagged_ = rules_.has_value();
    for (const auto& e : trace_) {
      if (tagged_) break;
      tagged_ = !e.user_metadata.empty() && !category_of_metadata(e.user_metadata).empty();
    }
    TimelineLevels net;
    std::unordered_map<std::uint64_t, std::uint32_t> live;  // address -> category, allocated in the trace
    std::vector<std::int64_t> before;                        // per category: freed, never allocated in it
    for (const auto& e : trace_) {
      const TimelineLevels d = timeline_delta(e);
      net.requested_in_use += d.requested_in_use;
      net.requested += d.requested;
      net.reserved += d.reserved;
      if (!tagged_) continue;
      if (e.action == TraceAction::alloc) {
        live[e.addr] = category_of(e);
      } else if (e.action == TraceAction::free_requested) {
        if (const auto it = live.find(e.addr); it != live.end()) {
          live.erase(it);
        } else {
          const std::uint32_t c = category_of(e);
          if (c >= before.size()) before.resize(c + 1, 0);
          before[c] += static_cast<std::int64_t>(e.size);
        }
      }
    }
    start_.requested_in_use = std::max<std::int64_t>(0, end.requested_in_use - net.requested_in_use);
    start_.requested = std::max<std::int64_t>(0, end.requested - net.requested);
    start_.reserved = std::max<std::int64_t>(0, end.reserved - net.reserved);
    end_ = {start_.requested_in_use + net.requested_in_use, start_.requested + net.requested,
            start_.reserved + net.reserved};
    // Allocated before the trace: in the category their free names; the rest is unknown.
    start_categories_.assign(categories_.size(), 0);
    std::int64_t named = 0;
    for (std::size_t c = 1; c < before.size(); ++c) {
      start_categories_[c] = before[c];
      named += before[c];
    }
    start_categories_[0] = std::max<std::int64_t>(0, start_.requested_in_use - named);
  }

  /// Levels before the first entry and after the last.
  [[nodiscard]] const TimelineLevels& start() const noexcept { return start_; }
  [[nodiscard]] const TimelineLevels& end() const noexcept { return end_; }
  /// Category names, index = category id; 0 is "" (unknown).
  [[nodiscard]] const std::vector<std::string>& categories() const noexcept { return categories_; }
  /// requested_in_use bytes per category before the first entry.
  [[nodiscard]] const std::vector<std::int64_t>& start_categories() const noexcept { return start_categories_; }
  [[nodiscard]] const Trace& trace() const noexcept { return trace_; }

  /// The levels after each entry: `f(std::size_t index, const Entry& e, const TimelineLevels& after,
  /// const std::vector<std::int64_t>& in_use_by_category)`, in trace order.
  template <class F>
  void walk(F&& f) const {
    TimelineLevels level = start_;
    std::vector<std::int64_t> by_category = start_categories_;
    std::unordered_map<std::uint64_t, std::uint32_t> live;
    std::size_t i = 0;
    for (const auto& e : trace_) {
      const TimelineLevels d = timeline_delta(e);
      level.requested_in_use += d.requested_in_use;
      level.requested += d.requested;
      level.reserved += d.reserved;
      if (!tagged_) {
        by_category[0] += d.requested_in_use;
      } else if (e.action == TraceAction::alloc) {
        const std::uint32_t c = category_of(e);
        live[e.addr] = c;
        if (c >= by_category.size()) by_category.resize(c + 1, 0);
        by_category[c] += static_cast<std::int64_t>(e.size);
      } else if (e.action == TraceAction::free_requested) {
        std::uint32_t c = 0;
        if (const auto it = live.find(e.addr); it != live.end()) {
          c = it->second;
          live.erase(it);
        } else {
          c = category_of(e);
        }
        if (c >= by_category.size()) by_category.resize(c + 1, 0);
        by_category[c] -= static_cast<std::int64_t>(e.size);
      }
      f(i++, e, static_cast<const TimelineLevels&>(level), static_cast<const std::vector<std::int64_t>&>(by_category));
    }
  }

  /// The highest level of each kind over the trace (its start included).
  [[nodiscard]] TimelineLevels peaks() const {
    TimelineLevels p = start_;
    walk([&p](std::size_t, const Entry&, const TimelineLevels& l, const std::vector<std::int64_t>&) {
      p.requested_in_use = std::max(p.requested_in_use, l.requested_in_use);
      p.requested = std::max(p.requested, l.requested);
      p.reserved = std::max(p.reserved, l.reserved);
    });
    return p;
  }

 private:
  static const Trace& trace_of(const S& snap, int device) {
    static const Trace kNoTrace;
    return device >= 0 && static_cast<std::size_t>(device) < snap.device_traces.size()
               ? snap.device_traces[static_cast<std::size_t>(device)]
               : kNoTrace;
  }

  // The category id of an entry; new names are added (the constructor's pass sees them all).
  std::uint32_t category_of(const Entry& e) const {
    std::string_view name = category_of_metadata(e.user_metadata);
    std::string ruled;
    if (name.empty() && rules_) {
      ruled = rules_->category_for(e.frames, e.time_us);
      name = ruled;
    }
    if (name.empty()) return 0;
    const auto [it, added] = index_.try_emplace(std::string(name), static_cast<std::uint32_t>(categories_.size()));
    if (added) {
      categories_.push_back(it->first);
      start_categories_.push_back(0);
    }
    return it->second;
  }

  const Trace& trace_;
  std::optional<CategoryRules> rules_;
  bool tagged_ = false;  // some entry may have a category
  TimelineLevels start_;
  TimelineLevels end_;
  mutable std::vector<std::string> categories_;
  mutable std::unordered_map<std::string, std::uint32_t> index_;
  mutable std::vector<std::int64_t> start_categories_;
};

GPUMEMPROF_NAMESPACE_END
