// Layer 4: a bounded FIFO that overwrites its oldest element when full -- the store of the
// sampler's snapshots, the profiler's results and the tracker's events, so a long-running
// program keeps bounded memory. Not synchronized: owners guard it with their own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

template <class T>
class RingBuffer {
 public:
  /// A buffer keeping the newest `capacity` elements (capacity >= 1).
  explicit RingBuffer(std::size_t capacity) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("RingBuffer: the capacity must be at least 1");
  }

  /// Appends `value`; when full, the oldest element is dropped (and counted).
  template <class U>
  void push(U&& value) {
    if (items_.size() < capacity_) {
      items_.push_back(std::forward<U>(value));
      return;
    }
    items_[head_] = std::forward<U>(value);
    if (++head_ == capacity_) head_ = 0;  // no division on the hot path
    ++dropped_;
  }

  /// The elements, oldest first.
  [[nodiscard]] std::vector<T> to_vector() const {
    std::vector<T> out;
    out.reserve(items_.size());
    for (std::size_t i = 0; i < items_.size(); ++i) out.push_back(items_[(head_ + i) % items_.size()]);
    return out;
  }

  /// Calls f(element) oldest first.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < items_.size(); ++i) f(items_[(head_ + i) % items_.size()]);
  }

  /// Removes every element; dropped() restarts at 0.
  void clear() noexcept {
    items_.clear();
    head_ = 0;
    dropped_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Elements overwritten because the buffer was full, since the last clear().
  [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }

 private:
  std::vector<T> items_;  // grows to capacity_, then wraps at head_
  std::size_t capacity_;
  std::size_t head_ = 0;  // index of the oldest element once full
  std::uint64_t dropped_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
