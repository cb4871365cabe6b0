// Layer 2: the caching allocator's cross-stream frees -- blocks freed while other streams may
// still use them (record_stream), waiting for events recorded on those streams, and frees
// deferred while a CUDA graph captures.
//
// Invariant: a block waits here exactly event_count times (once per event queued for it, or once
// as a deferred free), and a queue holds its stream's events in recording order. The allocator
// keeps the total in its hot path's gate (CachingAllocator::pending_events_) and changes this
// state only under its device mutex; this class owns no lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <iterator>
#include <vector>

#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

struct PendingEvent {
  Event event;
  Block* block;
};
struct StreamEvents {
  Stream stream;
  std::deque<PendingEvent> queue;  // in recording order
};

class CrossStreamEvents {
 public:
  using Queues = std::vector<StreamEvents>;

  /// The queue of `s`; null when it has none.
  [[nodiscard]] StreamEvents* find(Stream s) noexcept {
    auto it = std::find_if(queues_.begin(), queues_.end(), [s](const StreamEvents& se) { return se.stream == s; });
    return it != queues_.end() ? &*it : nullptr;
  }
  /// The queue of `s`, made when new (an empty queue is harmless: take_completed drops it). May
  /// throw std::bad_alloc, changing nothing.
  std::deque<PendingEvent>& queue_of(Stream s) {
    if (StreamEvents* q = find(s); q != nullptr) return q->queue;
    return queues_.emplace_back(StreamEvents{s, {}}).queue;
  }
  /// Every stream's queue, for the allocator's walks (it pops what completed).
  [[nodiscard]] Queues& queues() noexcept { return queues_; }
  [[nodiscard]] const Queues& queues() const noexcept { return queues_; }
  /// Drops `s`'s queue (emptied by the caller).
  void erase(Stream s) noexcept {
    if (StreamEvents* q = find(s); q != nullptr) queues_.erase(queues_.begin() + (q - queues_.data()));
  }

  /// Room for one more deferred free, so that defer() cannot throw. May throw std::bad_alloc.
  void reserve_deferred() { deferred_.reserve(deferred_.size() + 1); }
  /// `b`'s free waits for capture to end (after reserve_deferred()).
  void defer(Block* b) noexcept { deferred_.push_back(b); }
  /// The deferred frees, oldest first.
  [[nodiscard]] const std::vector<Block*>& deferred() const noexcept { return deferred_; }
  /// The `i`th deferred free goes ahead (its block leaves this list).
  void undefer(std::size_t i) noexcept { deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i)); }

 private:
  Queues queues_;
  std::vector<Block*> deferred_;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
