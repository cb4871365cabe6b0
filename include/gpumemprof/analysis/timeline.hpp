// Analysis layer: the one reading of a device trace into memory levels over time. Every report
// that draws memory over time (Perfetto counters, the HTML report, the category timeline) walks
// a TraceTimeline, so they agree on every curve.
//
// The levels, named as PyTorch names its numbers (allocated = block bytes, requested = the bytes
// asked for, reserved = segments; docs/pytorch-compat.md, the stats table). A trace entry carries the
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
// scopes: analysis/category_rules.hpp), until a category change (Snapshot::category_changes:
// set_category, gpumemprof_torch.categorize) moves its bytes to another one; its
// `free_requested` takes the bytes out of the category it has then. Changes are applied in their
// place among the entries (before the entry their trace_index names), so the split equals what
// category_stats() counted at every moment. Allocations made before the trace count in the
// category they had then: the `previous` of their first change, else the category their free
// carries, else (still live at the end) their block's category in the segments.
// Why changes are kept beside the trace rather than as entries: PyTorch's viewer knows only its
// own actions, and the block's category in `segments` alone would lose when the move happened.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
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
  explicit TraceTimeline(const S& snap, int device, const CategoryRules* rules = nullptr)
      : trace_(trace_of(snap, device)), changes_(category_changes_of(snap, device)) {
    if (rules != nullptr && !rules->empty()) {
      rules_ = *rules;
      rules_->set_scopes(snap.external_annotations, device);
    }
    categories_.emplace_back();  // index 0: unknown
    index_.emplace(std::string(), 0);
    TimelineLevels end;
    std::vector<const SnapshotBlock*> live_at_end;
    for (const SnapshotSegment& seg : snap.segments) {
      if (seg.device != device) continue;
      end.reserved += static_cast<std::int64_t>(seg.total_size);
      for (const SnapshotBlock& b : seg.blocks) {
        const auto n = static_cast<std::int64_t>(b.requested_size);
        if (b.state == BlockState::active_allocated) {
          end.requested_in_use += n;
          live_at_end.push_back(&b);
        }
        if (b.state != BlockState::inactive) end.requested += n;
      }
    }
    // Categories cost a lookup per allocation: only when some entry, change or block carries one
    // (or rules may).
    tagged_ = rules_.has_value() || !changes_.empty();
    for (const SnapshotBlock* b : live_at_end) tagged_ = tagged_ || !b->category.empty();
    for (const auto& e : trace_) {
      if (tagged_) break;
      tagged_ = !e.user_metadata.empty() && !category_of_metadata(e.user_metadata).empty();
    }
    TimelineLevels net;
    Live live;                         // address -> category, of allocations the trace has seen live
    std::vector<std::int64_t> before;  // per category: bytes allocated before the trace
    const auto add_before = [&before](std::uint32_t c, std::uint64_t n) {
      if (c >= before.size()) before.resize(c + 1, 0);
      before[c] += static_cast<std::int64_t>(n);
    };
    walk_impl(
        [&](std::size_t i, const Entry& e, Live& l) {
          const TimelineLevels d = timeline_delta(e);
          net.requested_in_use += d.requested_in_use;
          net.requested += d.requested;
          net.reserved += d.reserved;
          if (tagged_ && e.action == TraceAction::free_requested && !l.contains(e.addr))
            add_before(category_of(e, i), e.size);
        },
        [&](const CategoryChange& c, Live& l) {
          if (!l.contains(c.addr)) add_before(category_id(c.previous), c.size);
        },
        live);
    for (const SnapshotBlock* b : live_at_end) {  // live throughout: the category they end with
      if (tagged_ && !live.contains(b->address)) add_before(category_id(b->category), b->requested_size);
    }
    start_.requested_in_use = std::max<std::int64_t>(0, end.requested_in_use - net.requested_in_use);
    start_.requested = std::max<std::int64_t>(0, end.requested - net.requested);
    start_.reserved = std::max<std::int64_t>(0, end.reserved - net.reserved);
    end_ = {start_.requested_in_use + net.requested_in_use, start_.requested + net.requested,
            start_.reserved + net.reserved};
    // Allocated before the trace: in the categories found above; the rest is unknown.
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
  /// const std::vector<std::int64_t>& in_use_by_category)`, in trace order. Category changes
  /// show in the levels after the first entry that follows them.
  template <class F>
  void walk(F&& f) const {
    walk(f, [](const CategoryChange&, const std::vector<std::int64_t>&) {});
  }

  /// walk(), and `moved(const CategoryChange& c, const std::vector<std::int64_t>& in_use_by_category)`
  /// after each category change, in its place.
  template <class F, class Moved>
  void walk(F&& f, Moved&& moved) const {
    TimelineLevels level = start_;
    std::vector<std::int64_t> by_category = start_categories_;
    const auto add = [&by_category](std::uint32_t c, std::int64_t n) {
      if (c >= by_category.size()) by_category.resize(c + 1, 0);
      by_category[c] += n;
    };
    Live live;
    walk_impl(
        [&](std::size_t i, const Entry& e, const Live& l) {
          const TimelineLevels d = timeline_delta(e);
          level.requested_in_use += d.requested_in_use;
          level.requested += d.requested;
          level.reserved += d.reserved;
          if (!tagged_) {
            by_category[0] += d.requested_in_use;
          } else if (e.action == TraceAction::alloc) {
            add(category_of(e, i), static_cast<std::int64_t>(e.size));
          } else if (e.action == TraceAction::free_requested) {
            const auto it = l.find(e.addr);
            add(it != l.end() ? it->second : category_of(e, i), -static_cast<std::int64_t>(e.size));
          }
          f(i, e, static_cast<const TimelineLevels&>(level),
            static_cast<const std::vector<std::int64_t>&>(by_category));
        },
        [&](const CategoryChange& c, const Live& l) {
          const auto it = l.find(c.addr);
          const auto n = static_cast<std::int64_t>(c.size);
          add(it != l.end() ? it->second : category_id(c.previous), -n);
          add(category_id(c.category), n);
          moved(c, static_cast<const std::vector<std::int64_t>&>(by_category));
        },
        live);
  }

  /// This device's category changes (Snapshot::category_changes), in trace order.
  [[nodiscard]] const std::vector<CategoryChange>& changes() const noexcept { return changes_; }

  /// The requested_in_use bytes per category (index = category id) after the last entry and the
  /// last change: what category_stats() said of the allocations' requested bytes then.
  [[nodiscard]] std::vector<std::int64_t> end_categories() const {
    std::vector<std::int64_t> last = start_categories_;
    walk([&](std::size_t, const Entry&, const TimelineLevels&, const std::vector<std::int64_t>& now) { last = now; },
         [&](const CategoryChange&, const std::vector<std::int64_t>& now) { last = now; });
    return last;
  }

  /// The highest requested_in_use bytes of each category (index = category id) over the trace,
  /// its start and every moment between a change and the next entry included.
  [[nodiscard]] std::vector<std::int64_t> category_peaks() const {
    std::vector<std::int64_t> peak = start_categories_;
    const auto raise = [&peak](const std::vector<std::int64_t>& now) {
      if (peak.size() < now.size()) peak.resize(now.size(), 0);
      for (std::size_t c = 0; c < now.size(); ++c) peak[c] = std::max(peak[c], now[c]);
    };
    walk([&](std::size_t, const Entry&, const TimelineLevels&, const std::vector<std::int64_t>& now) { raise(now); },
         [&](const CategoryChange&, const std::vector<std::int64_t>& now) { raise(now); });
    return peak;
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

  using Live = std::unordered_map<std::uint64_t, std::uint32_t>;  // address -> category id

  // The trace in order with the category changes in their places: `entry(i, e, live)` before
  // `live` takes entry i in, `change(c, live)` likewise. `live` maps each allocation the trace
  // has seen live (allocated, or moved by a change) to its category now.
  template <class OnEntry, class OnChange>
  void walk_impl(OnEntry&& entry, OnChange&& change, Live& live) const {
    std::size_t k = 0;
    const auto changes_until = [&](std::size_t i) {
      for (; k < changes_.size() && changes_[k].trace_index <= i; ++k) {
        const CategoryChange& c = changes_[k];
        change(c, live);
        if (tagged_) live[c.addr] = category_id(c.category);
      }
    };
    std::size_t i = 0;
    for (const auto& e : trace_) {
      changes_until(i);
      entry(i, e, live);
      if (tagged_ && e.action == TraceAction::alloc) live[e.addr] = category_of(e, i);
      if (tagged_ && e.action == TraceAction::free_requested) live.erase(e.addr);
      ++i;
    }
    changes_until(std::numeric_limits<std::size_t>::max());
  }

  // The category id of entry number `i`; new names are added (the constructor's pass sees them all).
  std::uint32_t category_of(const Entry& e, std::size_t i) const {
    std::string_view name = category_of_metadata(e.user_metadata);
    std::string ruled;
    if (name.empty() && rules_) {
      ruled = rules_->category_for(e.frames, i, e.time_us);
      name = ruled;
    }
    return category_id(name);
  }

  // The id of a category name ("" = unknown = 0); new names are added.
  std::uint32_t category_id(std::string_view name) const {
    if (name.empty()) return 0;
    const auto [it, added] = index_.try_emplace(std::string(name), static_cast<std::uint32_t>(categories_.size()));
    if (added) {
      categories_.push_back(it->first);
      start_categories_.push_back(0);
    }
    return it->second;
  }

  const Trace& trace_;
  const std::vector<CategoryChange>& changes_;  // this device's, in trace order
  std::optional<CategoryRules> rules_;
  bool tagged_ = false;  // some entry may have a category
  TimelineLevels start_;
  TimelineLevels end_;
  mutable std::vector<std::string> categories_;
  mutable std::unordered_map<std::string, std::uint32_t> index_;
  mutable std::vector<std::int64_t> start_categories_;
};

GPUMEMPROF_NAMESPACE_END
