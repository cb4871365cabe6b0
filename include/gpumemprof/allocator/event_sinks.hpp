// Layer 2: the allocator's event sinks -- a fixed set of plain function pointers with a user
// pointer (the shape of profiler/scope_hooks.hpp), told about every allocator event.
//
// No sink runs under an allocator lock. An allocator call that may cause events first asks the
// sinks to `prepare` (with no lock held: the history recorder walks the stack here) and keeps the
// returned context handle with the blocks and segments it creates; under its locks it only
// appends events to a per-stream buffer (event_buffer.hpp); after them, and whenever a reader
// asks (CachingAllocator::flush_events, with_lock_then), the buffers are merged in the
// allocator's serial order and told to the sinks, one delivery at a time. With no sink the hot
// path pays one predictable branch; there is no virtual call and no lookup.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A receiver of allocator events. `on_events` runs after the events, with no allocator lock held,
/// one call at a time per allocator, with a batch of events in the allocator's serial order
/// (consecutive calls continue that order); it must not throw and must not call back into the
/// allocator. `prepare` (optional) runs at the entry of every allocator call that may cause
/// events, on the calling thread, with no allocator lock held, on several threads at once; the
/// handle it returns (0 = none) is kept with the blocks and segments the call creates (their
/// events' `context`, BlockView::context) and is every event's `prepared`. At most one sink of an
/// allocator should prepare (the history layer's); a sink with nothing to prepare leaves it null,
/// and the allocator's calls then skip it.
struct AllocatorEventSink {
  void (*on_events)(void* user, std::span<const AllocatorEvent> events) noexcept = nullptr;
  void* user = nullptr;
  std::uint64_t (*prepare)(void* user, TraceAction call) noexcept = nullptr;
};

namespace detail {

/// The sinks of one allocator. add/remove/emit under the allocator's delivery lock; active() and
/// prepare() anywhere.
class EventSinks {
 public:
  static constexpr std::size_t capacity = 4;

  /// Adds `sink`; returns its slot. Throws std::length_error when all slots are taken.
  std::size_t add(const AllocatorEventSink& sink) {
    check(sink);
    for (std::size_t i = 0; i < capacity; ++i) {
      if (slots_[i].on_events == nullptr) {
        put(i, sink);
        return i;
      }
    }
    throw std::length_error("add_event_sink: all " + std::to_string(capacity) + " event sink slots are taken");
  }
  /// Puts `sink` in `slot` in place of the sink there (an empty slot: as add).
  void replace(std::size_t slot, const AllocatorEventSink& sink) {
    check(sink);
    if (slot >= capacity) throw std::out_of_range("replace_event_sink: no slot " + std::to_string(slot));
    remove(slot);
    put(slot, sink);
  }
  /// Removes the sink in `slot` once no prepare() call uses it; unknown or empty slots are ignored.
  void remove(std::size_t slot) noexcept {
    if (slot >= capacity || slots_[slot].on_events == nullptr) return;
    if (preparer_.load() == &slots_[slot]) {
      preparer_.store(nullptr);
      while (preparing_.load() != 0) std::this_thread::yield();  // a prepare() that saw it ends
    }
    slots_[slot] = {};
    --count_;
  }
  /// Sinks added (changes under the delivery lock).
  [[nodiscard]] std::size_t count() const noexcept { return count_; }

  /// Whether events are buffered now: written by the allocator with every lock held, read under
  /// any of its locks (or, to decide whether to deliver, under none).
  [[nodiscard]] bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  void set_active(bool on) noexcept { active_.store(on, std::memory_order_relaxed); }

  /// The preparing sink's handle for a call of kind `call`; 0 when there is none.
  std::uint64_t prepare(TraceAction call) const noexcept {
    if (GPUMEMPROF_LIKELY(preparer_.load(std::memory_order_relaxed) == nullptr)) return 0;
    preparing_.fetch_add(1);  // seq_cst: remove() either sees it or this sees the slot gone
    const AllocatorEventSink* s = preparer_.load();
    const std::uint64_t handle = s != nullptr ? s->prepare(s->user, call) : 0;
    preparing_.fetch_sub(1);
    return handle;
  }

  /// Tells every sink a batch of events.
  void emit(std::span<const AllocatorEvent> events) const noexcept {
    for (const AllocatorEventSink& s : slots_) {
      if (s.on_events != nullptr) s.on_events(s.user, events);
    }
  }

 private:
  static void check(const AllocatorEventSink& sink) {
    if (sink.on_events == nullptr) throw std::invalid_argument("add_event_sink: the sink has no on_events function");
  }
  void put(std::size_t i, const AllocatorEventSink& sink) noexcept {
    slots_[i] = sink;
    ++count_;
    if (sink.prepare != nullptr && preparer_.load() == nullptr) preparer_.store(&slots_[i]);
  }

  std::array<AllocatorEventSink, capacity> slots_{};
  std::size_t count_ = 0;
  std::atomic<bool> active_{false};
  std::atomic<const AllocatorEventSink*> preparer_{nullptr};
  mutable std::atomic<std::size_t> preparing_{0};
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
