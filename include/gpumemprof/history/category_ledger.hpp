// Layer 3: bytes per memory category (history/memory_category.hpp tags them), kept beside the
// allocator: a CategoryLedger is one of the allocator's event sinks with its own lock, so the
// allocator core only stamps each block with the thread's category id and hands it back with
// the block's events.
//
// What a category holds, in PyTorch's two measures of the same blocks (memory_stats):
//   requested -- the bytes asked for, from `alloc` to `free_completed` (requested_bytes: the
//                categories sum to memory_stats().requested_bytes.all.current);
//   allocated -- the blocks' bytes (rounded to 512 B, or a whole unsplit block), from `alloc` to
//                `free_requested` (allocated_bytes.all.current). torch.profiler's memory timeline
//                sizes the tensors it saw allocated so.
// A block freed under another category's scope leaves the category it was allocated in.
//
// A ledger attached to an allocator that already holds blocks starts from them (it reads each
// live block's category under the allocator's lock); its peaks count from that moment. The
// default allocators get their ledgers at the first memory_category() scope of the process (or
// the first category_stats() call): before that nothing is attached and the allocator pays
// nothing for categories.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The bytes of one category (PyTorch's Stat fields current and peak, for two measures). Each
/// peak is the highest of its own `current` since the ledger attached or reset_peaks().
struct CategoryStat {
  std::int64_t current = 0;            ///< requested bytes live now (requested_bytes)
  std::int64_t peak = 0;               ///< highest `current`
  std::int64_t allocated_current = 0;  ///< block bytes held now (allocated_bytes)
  std::int64_t allocated_peak = 0;     ///< highest `allocated_current`
};

/// Category name -> its bytes; untagged memory is "unknown".
using CategoryStats = std::map<std::string, CategoryStat>;

namespace category {
/// The name under which untagged memory is reported.
inline constexpr const char* unknown = "unknown";
}  // namespace category

class CategoryLedger {
 public:
  CategoryLedger() = default;
  /// Detaches: destroy the ledger before the allocator it is attached to.
  ~CategoryLedger() { detach(); }
  CategoryLedger(const CategoryLedger&) = delete;
  CategoryLedger& operator=(const CategoryLedger&) = delete;

  /// Starts counting `allocator`'s blocks by category (from its live blocks). One allocator per
  /// ledger: attaching to another throws std::logic_error.
  template <DeviceBackend B>
  void attach(CachingAllocator<B>& allocator) {
    std::lock_guard lock(attach_mutex_);
    if (allocator_ == &allocator) return;
    if (allocator_ != nullptr) throw std::logic_error("CategoryLedger::attach: already attached to another allocator");
    // The sink first, then the live blocks read under the allocator's lock replace whatever the
    // sink was told of events before that lock (with_lock_then tells it those first, and later
    // ones after): no event is lost or counted twice.
    const std::size_t slot = allocator.add_event_sink({&CategoryLedger::sink_events, this});
    allocator.with_lock_then(
        [](const auto& view) {
          std::vector<CategoryStat> live;
          view.visit_segments([&live](const SegmentView& s) {
            for (const BlockView& b : s.blocks) {
              if (b.state == BlockState::inactive) continue;
              if (b.category >= live.size()) live.resize(b.category + 1);
              live[b.category].current += static_cast<std::int64_t>(b.requested_size);
              if (b.state == BlockState::active_allocated) {
                live[b.category].allocated_current += static_cast<std::int64_t>(b.size);
              }
            }
          });
          for (CategoryStat& c : live) {
            c.peak = c.current;
            c.allocated_peak = c.allocated_current;
          }
          return live;
        },
        [this](const std::vector<CategoryStat>& live) {
          std::lock_guard state(mutex_);
          by_id_.assign(std::max(live.size(), by_id_.size()), CategoryStat{});
          std::copy(live.begin(), live.end(), by_id_.begin());
          return 0;
        });
    flush_ = [&allocator] { allocator.flush_events(); };
    allocator_ = &allocator;
    remove_ = [&allocator, slot] { allocator.remove_event_sink(slot); };
  }

  /// Stops counting; the figures are kept.
  void detach() {
    std::lock_guard lock(attach_mutex_);
    if (remove_) remove_();
    remove_ = nullptr;
    flush_ = nullptr;
    allocator_ = nullptr;
  }

  /// Bytes per category: every category seen, and "unknown" always.
  [[nodiscard]] CategoryStats stats() const {
    {
      std::lock_guard lock(attach_mutex_);  // every event before this call counted
      if (flush_) flush_();
    }
    std::vector<CategoryStat> copy;
    {
      std::lock_guard lock(mutex_);
      copy = by_id_;
    }
    const std::vector<std::string> names =
        detail::MetadataStrings::instance().lookup_all(static_cast<std::uint32_t>(copy.size()));
    CategoryStats out;
    out[category::unknown] = copy.empty() ? CategoryStat{} : copy[0];
    for (std::size_t id = 1; id < copy.size(); ++id) {
      if (id >= names.size()) break;
      CategoryStat& s = out[names[id]];  // two ids never share a name; += keeps "unknown" exact
      s.current += copy[id].current;
      s.peak = std::max(s.peak, copy[id].peak);
      s.allocated_current += copy[id].allocated_current;
      s.allocated_peak = std::max(s.allocated_peak, copy[id].allocated_peak);
    }
    return out;
  }

  /// Sets every category's peak to its current bytes.
  void reset_peaks() {
    std::lock_guard lock(mutex_);
    for (CategoryStat& s : by_id_) {
      s.peak = s.current;
      s.allocated_peak = s.allocated_current;
    }
  }

 private:
  // The event sink: one lock per batch. An event that finds no memory to count a new category
  // in goes uncounted.
  static void sink_events(void* user, std::span<const AllocatorEvent> events) noexcept {
    auto* self = static_cast<CategoryLedger*>(user);
    std::lock_guard lock(self->mutex_);
    for (const AllocatorEvent& e : events) {
      const auto requested = static_cast<std::int64_t>(e.size);
      const auto block = static_cast<std::int64_t>(e.block_size);
      switch (e.action) {
        case TraceAction::alloc: self->add(e.category, requested, block); break;
        case TraceAction::free_requested: self->add(e.category, 0, -block); break;
        case TraceAction::free_completed: self->add(e.category, -requested, 0); break;
        case TraceAction::category_change:  // a live block (CachingAllocator::set_category): both measures move
          if (self->add(e.previous_category, -requested, -block)) self->add(e.category, requested, block);
          break;
        default: break;
      }
    }
  }

  // Adds to category `id` (mutex_ held); false when out of memory (the event goes uncounted).
  bool add(std::uint32_t id, std::int64_t requested, std::int64_t allocated) noexcept {
    try {
      if (id >= by_id_.size()) by_id_.resize(std::size_t{id} + 1);
    } catch (...) {
      return false;
    }
    CategoryStat& s = by_id_[id];
    s.current += requested;
    s.peak = std::max(s.peak, s.current);
    s.allocated_current += allocated;
    s.allocated_peak = std::max(s.allocated_peak, s.allocated_current);
    return true;
  }

  // Taken by the sink while the allocator delivers events (it then holds none of its own locks)
  // and by readers.
  mutable std::mutex mutex_;
  std::vector<CategoryStat> by_id_;  // index = category id (0 = unknown)

  mutable std::mutex attach_mutex_;  // never taken under the allocator's lock
  const void* allocator_ = nullptr;
  std::function<void()> remove_;
  std::function<void()> flush_;  // has the allocator deliver its buffered events
};

namespace detail {

/// The ledgers of the default allocators (never destroyed: allocators outlive statics).
class DefaultCategoryLedgers {
 public:
  static DefaultCategoryLedgers& instance() {
    static auto* ledgers = new DefaultCategoryLedgers();
    return *ledgers;
  }

  /// From now on every default allocator, existing or created later, has a ledger.
  void enable() {
    if (enabled_.load(std::memory_order_acquire)) return;
    std::lock_guard once(enable_mutex_);
    if (enabled_.load(std::memory_order_relaxed)) return;
    default_allocator_created.store(&DefaultCategoryLedgers::on_created, std::memory_order_release);
    for_each_default_allocator([this](DeviceAllocator& a) { ledger_of(a); });
    enabled_.store(true, std::memory_order_release);
  }

  /// The ledger of `allocator`, attached on first use.
  CategoryLedger& ledger_of(DeviceAllocator& allocator) {
    std::unique_ptr<CategoryLedger>* slot = nullptr;
    {
      std::lock_guard lock(mutex_);
      slot = &ledgers_[&allocator];
      if (*slot == nullptr) *slot = std::make_unique<CategoryLedger>();
    }
    (*slot)->attach(allocator);  // no-op when attached
    return **slot;
  }

 private:
  static void on_created(DeviceAllocator& a) { instance().ledger_of(a); }

  std::atomic<bool> enabled_{false};
  std::mutex enable_mutex_;
  std::mutex mutex_;
  std::unordered_map<const DeviceAllocator*, std::unique_ptr<CategoryLedger>> ledgers_;
};

}  // namespace detail

/// Requested and allocated bytes per memory category of the default allocator of `device`,
/// current and peak (see the header comment for when peaks start).
[[nodiscard]] inline CategoryStats category_stats(const Device& device = Device()) {
  auto& ledgers = detail::DefaultCategoryLedgers::instance();
  ledgers.enable();
  return ledgers.ledger_of(default_allocator(device)).stats();
}

/// Sets the peak of every category of `device`'s default allocator to its current bytes.
inline void reset_category_peaks(const Device& device = Device()) {
  auto& ledgers = detail::DefaultCategoryLedgers::instance();
  ledgers.enable();
  ledgers.ledger_of(default_allocator(device)).reset_peaks();
}

GPUMEMPROF_NAMESPACE_END
