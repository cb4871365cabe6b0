// Layer 2: the peak of allocated bytes over any number of open intervals ("windows"), nested or
// overlapping, without touching the allocator's global peak.
//
// Only the newest open window is updated per allocation (O(1)). Window k's stored peak covers
// the time from its opening until the next window opened; its true peak is the maximum of its
// own and every newer open window's stored peak. When a window closes, its stored peak is folded
// into the window opened just before it, which keeps that rule true.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class PeakWindows {
 public:
  /// Called after every increase of the tracked value.
  void on_value(std::int64_t current) noexcept {
    if (!open_.empty() && current > open_.back().peak) open_.back().peak = current;
  }

  /// Opens a window at the current value; returns its id (never 0).
  std::uint64_t open(std::int64_t current) {
    open_.push_back({++next_id_, current});
    return next_id_;
  }

  /// The peak since window `id` opened (it stays open).
  [[nodiscard]] std::int64_t peak(std::uint64_t id) const {
    const std::size_t k = index_of(id);
    std::int64_t p = open_[k].peak;
    for (std::size_t j = k + 1; j < open_.size(); ++j) p = std::max(p, open_[j].peak);
    return p;
  }

  /// Closes window `id`; returns its peak.
  std::int64_t close(std::uint64_t id) {
    const std::size_t k = index_of(id);
    const std::int64_t p = peak(id);
    if (k > 0) open_[k - 1].peak = std::max(open_[k - 1].peak, open_[k].peak);
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(k));
    return p;
  }

  [[nodiscard]] std::size_t open_count() const noexcept { return open_.size(); }

 private:
  struct Window {
    std::uint64_t id;
    std::int64_t peak;
  };
  [[nodiscard]] std::size_t index_of(std::uint64_t id) const {
    // Ids increase with opening order, and open_ keeps that order.
    auto it =
        std::lower_bound(open_.begin(), open_.end(), id, [](const Window& w, std::uint64_t v) { return w.id < v; });
    if (it == open_.end() || it->id != id) {
      throw std::invalid_argument("peak window " + std::to_string(id) + " is not open");
    }
    return static_cast<std::size_t>(it - open_.begin());
  }

  std::vector<Window> open_;
  std::uint64_t next_id_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
