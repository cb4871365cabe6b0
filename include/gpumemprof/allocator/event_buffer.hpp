// Layer 2: allocator events on their way to the event sinks (event_sinks.hpp). Each stream shard
// has a lane, and so do the slow paths; an event is appended to a lane under that lane's lock
// (the shard's spin lock; the device mutex), stamped with the clock that orders the stats
// journals (stamp_clock.hpp). No sink runs and no mutex is taken there, and nothing is allocated
// while the lane holds fewer than kCapacity events (reserve() runs when sinks are added; a
// stream first seen while sinks are attached allocates its lane on its first event). A delivery
// (one at a time, under the allocator's delivery lock, with no other allocator lock held while
// sinks run) reads a cut, takes every lane's buffer (an O(1) swap under that lane's lock), and
// tells the sinks every event stamped before the cut in stamp order -- the allocator's serial
// order; later events wait in the lane's run for the next delivery.
//
// When: a call whose event brings its lane to a multiple of kDeliverAt waiting events delivers
// after letting its locks go (unless another delivery runs: then the lane tries again
// kDeliverAt events later, not at every call); readers (flush_events, snapshots) deliver
// everything before them. A full lane -- deliveries stalled for kCapacity events, the delivering
// thread descheduled while others keep allocating -- doubles under its lock (an allocation on
// the hot path, only then); if that fails, the event is dropped and counted (dropped()).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/allocator/event_sinks.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/stats_journal.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/stamp_clock.hpp"
#include "gpumemprof/detail/thread_category.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

using EventRun = StampedRun<AllocatorEvent>;

/// Set when this thread's event brought a lane to a multiple of EventLane::kDeliverAt: its call delivers.
inline thread_local bool thread_events_due = false;

class EventLane {
 public:
  static constexpr std::size_t kCapacity = 1024;
  static constexpr std::size_t kDeliverAt = 256;

  EventLane() = default;
  EventLane(const EventLane&) = delete;
  EventLane& operator=(const EventLane&) = delete;

  /// Room for kCapacity events, so that appending allocates nothing. The caller holds the
  /// lane's lock and the delivery lock. May throw std::bad_alloc.
  void reserve() {
    buffer_.reserve(kCapacity);
    taken_.reserve(kCapacity);
  }

  /// Appends `e`, stamped now (never below the lane's previous stamp; a free_completed that is
  /// not deferred: its free_requested's stamp); returns whether the lane
  /// should be delivered (a multiple of kDeliverAt events wait). The caller holds the lane's lock.
  bool push(AllocatorEvent e) noexcept {
    if (GPUMEMPROF_UNLIKELY(buffer_.size() == buffer_.capacity())) {
      try {
        buffer_.reserve(std::max(kCapacity, 2 * buffer_.capacity()));
      } catch (...) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
    // A free completed in the call that requested it follows the request under the same lock
    // hold: it keeps the request's stamp (history gives both one time), one clock read less.
    if (e.action != TraceAction::free_completed || e.deferred) last_ = std::max(last_, stamp_now());
    e.stamp = last_;
    buffer_.push_back(e);
    return buffer_.size() % kDeliverAt == 0;
  }
  /// Whether events wait in the buffer. The caller holds the lane's lock.
  [[nodiscard]] bool buffered() const noexcept { return !buffer_.empty(); }

  /// Takes the buffered events (O(1)). The caller holds the lane's lock and the delivery lock;
  /// collect() must follow before the next take().
  void take() noexcept { taken_.swap(buffer_); }
  /// Adds the taken events to the run (no lane lock needed). The caller holds the delivery lock.
  void collect() noexcept {
    try {
      run_.add(taken_);
    } catch (...) {  // no room to carry them: they are lost, and counted
      dropped_.fetch_add(taken_.size(), std::memory_order_relaxed);
      taken_.clear();
    }
  }
  /// The events taken and not delivered yet. The caller holds the delivery lock.
  [[nodiscard]] EventRun& run() noexcept { return run_; }

  /// Events lost because the lane could not grow.
  [[nodiscard]] std::size_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

 private:
  std::vector<AllocatorEvent> buffer_;  // under the lane's lock
  std::uint64_t last_ = 0;              // under the lane's lock
  std::vector<AllocatorEvent> taken_;   // under the delivery lock (and the lane's, in take())
  EventRun run_;                        // under the delivery lock
  std::atomic<std::size_t> dropped_{0};
};

/// Tells `sinks` every event stamped before `cut` in the runs of `lanes` (each collected), in
/// stamp order, equal stamps in lane order; later events stay in their runs. `scratch` is reused
/// between deliveries. The caller holds the delivery lock and no other allocator lock.
template <class Lanes>
void deliver_events(const Lanes& lanes, std::uint64_t cut, const EventSinks& sinks, std::vector<EventRun*>& scratch) {
  scratch.clear();
  for (EventLane* lane : lanes) {
    if (lane->run().has_before(cut)) scratch.push_back(&lane->run());  // capacity kept: no allocation once warm
  }
  merge_spans_by_stamp(scratch, cut, [&sinks](const AllocatorEvent* first, std::size_t n) { sinks.emit({first, n}); });
}

/// At the entry of an allocator call that may cause events: with sinks, asks them to prepare (no
/// lock held yet; the handle goes to thread_event_context for the call's events and new blocks)
/// and, on the way out (every lock let go), delivers when the call's events filled a lane to
/// EventLane::kDeliverAt (thread_events_due) and no other delivery runs.
template <class Allocator>
class EventCall {
 public:
  EventCall(const Allocator& a, TraceAction call) noexcept : a_(a) {
    if (GPUMEMPROF_UNLIKELY(a.delivery_.sinks().active())) {
      on_ = true;
      previous_ = thread_event_context;
      thread_event_context = a.delivery_.sinks().prepare(call);
    }
  }
  ~EventCall() {
    if (GPUMEMPROF_UNLIKELY(on_)) {
      thread_event_context = previous_;
      if (thread_events_due) {
        thread_events_due = false;
        a_.deliver_events(false);
      }
    }
  }
  EventCall(const EventCall&) = delete;
  EventCall& operator=(const EventCall&) = delete;

 private:
  const Allocator& a_;
  bool on_ = false;
  std::uint64_t previous_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
