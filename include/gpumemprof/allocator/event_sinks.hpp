// Layer 2: the allocator's event sinks -- a fixed set of plain function pointers with a user
// pointer (the shape of profiler/scope_hooks.hpp), told about every allocator event.
//
// The set lives inside the allocator: sinks are added and removed with every allocator lock held
// and called under the lock of the event's stream (its shard), so a removed sink is never called
// afterwards. Events of different streams may arrive at once from different threads: a sink
// locks its own state (the history recorder does), and the order in which it takes that lock is
// the allocator's event order. With no sink the hot path pays one predictable branch on
// `count()`; there is no virtual call and no lookup.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A receiver of allocator events. `on_event` runs under an allocator lock, possibly on several
/// threads at once: it must be quick, thread-safe, must not throw and must not call back into
/// the allocator. For alloc and segment_alloc/map
/// its return value (a context handle; 0 = none) is kept with the block/segment and handed back
/// with the matching free events and in views. At most one sink of an allocator should return
/// handles (the history layer's); the first non-zero one is kept.
struct AllocatorEventSink {
  std::uint64_t (*on_event)(void* user, const AllocatorEvent& event) noexcept = nullptr;
  void* user = nullptr;
};

namespace detail {

/// The sinks of one allocator: add/remove with every allocator lock held, count/emit under any.
class EventSinks {
 public:
  static constexpr std::size_t capacity = 4;

  /// Adds `sink`; returns its slot. Throws std::length_error when all slots are taken.
  std::size_t add(const AllocatorEventSink& sink) {
    if (sink.on_event == nullptr) throw std::invalid_argument("add_event_sink: the sink has no on_event function");
    for (std::size_t i = 0; i < capacity; ++i) {
      if (slots_[i].on_event == nullptr) {
        slots_[i] = sink;
        ++count_;
        return i;
      }
    }
    throw std::length_error("add_event_sink: all " + std::to_string(capacity) + " event sink slots are taken");
  }
  /// Removes the sink in `slot`; unknown or empty slots are ignored.
  void remove(std::size_t slot) noexcept {
    if (slot >= capacity || slots_[slot].on_event == nullptr) return;
    slots_[slot] = {};
    --count_;
  }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }

  /// Tells every sink; returns the first non-zero context handle. Call only when count() != 0.
  std::uint64_t emit(const AllocatorEvent& e) const noexcept {
    std::uint64_t context = 0;
    for (const AllocatorEventSink& s : slots_) {
      if (s.on_event == nullptr) continue;
      const std::uint64_t c = s.on_event(s.user, e);
      if (context == 0) context = c;
    }
    return context;
  }

 private:
  std::array<AllocatorEventSink, capacity> slots_{};
  std::size_t count_ = 0;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
