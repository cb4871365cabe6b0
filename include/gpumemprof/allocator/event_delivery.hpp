// Layer 2: the caching allocator's delivery of buffered events to its sinks (event_sinks.hpp,
// event_buffer.hpp) -- the delivery lock, the sink set, the slow paths' lane, the lists a
// delivery walks, and the buffering of each event in a lane while there are sinks (notify).
//
// Invariants. One delivery at a time: every delivery holds the delivery lock (lock()), and the
// sinks are told only under it, holding no other allocator lock. Every event stamped before a
// delivery's cut is in its lane once that lane's lock has been taken after the cut, so a
// delivery that takes every lane after its cut tells the sinks every earlier event, in stamp
// order. The sink set changes only between two deliveries (the owner's change_sinks), and
// active() changes only exclusively (every shard held). The slow paths' lane is written under
// the owner's device mutex; each shard's lane under the shard's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/event_buffer.hpp"
#include "gpumemprof/allocator/event_sinks.hpp"
#include "gpumemprof/allocator/shard_registry.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"
#include "gpumemprof/detail/thread_category.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class EventDelivery {
 public:
  /// The delivery lock: one delivery (or change of the sink set) at a time.
  [[nodiscard]] Mutex& lock() const noexcept GPUMEMPROF_RETURN_CAPABILITY(mutex_) { return mutex_; }
  /// The sinks. Their set changes under lock(); active() is read on every allocator call.
  [[nodiscard]] EventSinks& sinks() noexcept { return sinks_; }
  [[nodiscard]] const EventSinks& sinks() const noexcept { return sinks_; }
  /// The lane of the slow paths' events, written under the owner's device mutex.
  [[nodiscard]] EventLane& slow_lane() const noexcept { return slow_; }

  /// Buffers an event in `lane`, whose lock the caller holds (a shard's; the slow lane: the
  /// owner's device mutex), when there are sinks. The caller pays the test of active() only.
  void notify(EventLane& lane, TraceAction action, std::uintptr_t addr, std::size_t size, Stream stream,
              std::uint64_t context = 0, bool deferred = false, std::uint32_t category = 0,
              std::uint32_t previous_category = 0, std::size_t block_size = 0) const noexcept {
    if (GPUMEMPROF_UNLIKELY(sinks_.active())) {
      buffer(lane, action, addr, size, stream, context, deferred, category, previous_category, block_size);
    }
  }
  /// A block's alloc/free event: it carries the block's context handle, category and block bytes.
  void notify_block(EventLane& lane, TraceAction action, const Block& b, bool deferred = false) const noexcept {
    if (GPUMEMPROF_UNLIKELY(sinks_.active())) {  // the block is read only then
      buffer(lane, action, b.addr, b.requested, b.stream, b.context, deferred, b.category, 0, b.size);
    }
  }
  /// The context handle of what the current call creates: what the sinks prepared at its entry.
  [[nodiscard]] std::uint64_t new_context() const noexcept { return sinks_.active() ? thread_event_context : 0; }

  /// Delivers the events buffered in the slow lane and every shard's lane of `shards`; unless
  /// `wait`, gives up when the delivery lock or `device` (the owner's device mutex, which guards
  /// the shard list) is busy. The caller holds no allocator lock.
  void deliver(bool wait, Mutex& device, const ShardRegistry& shards) const GPUMEMPROF_EXCLUDES(mutex_, device);

  /// Moves every lane's events (the slow lane's, each shard's of `shards`) to its run and, with
  /// `reserve`, makes room in every lane. The caller holds the delivery lock and the owner's
  /// exclusive lock: `device` and every shard (a set the analysis cannot name). `device` is named
  /// for the analysis only.
  void take_all(const ShardRegistry& shards, [[maybe_unused]] const Mutex& device, bool reserve = false) const
      GPUMEMPROF_REQUIRES(mutex_, device);

  /// Tells the sinks the taken events stamped before `cut`; the caller holds only the delivery lock.
  void deliver_taken(std::uint64_t cut) const GPUMEMPROF_REQUIRES(mutex_);

 private:
  // Out of line, the event made here: the callers inline only the test of active() (no room for
  // an event on their stack).
  GPUMEMPROF_NOINLINE static void buffer(EventLane& lane, TraceAction action, std::uintptr_t addr, std::size_t size,
                                         Stream stream, std::uint64_t context, bool deferred, std::uint32_t category,
                                         std::uint32_t previous_category, std::size_t block_size) noexcept {
    if (lane.push({action, addr, size, stream, context, deferred, category, previous_category, 0, thread_event_context,
                   thread_user_metadata, block_size})) {
      thread_events_due = true;
    }
  }

  mutable Mutex mutex_;
  // Every lane and every shard of the latest take, and the merge scratch.
  mutable std::vector<EventLane*> lanes_ GPUMEMPROF_GUARDED_BY(mutex_);
  mutable std::vector<Shard*> shards_ GPUMEMPROF_GUARDED_BY(mutex_);
  mutable std::vector<EventRun*> runs_ GPUMEMPROF_GUARDED_BY(mutex_);
  EventSinks sinks_;
  mutable EventLane slow_;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/event_delivery.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/event_delivery-inl.hpp"
#endif
