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
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
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
          used_.resize(by_id_.size(), false);
          for (std::size_t id = 0; id < live.size(); ++id) {
            if (live[id].current != 0 || live[id].allocated_current != 0) used_[id] = true;
          }
          return 0;
        });
    flush_ = [&allocator] { allocator.flush_events(); };
    allocator_ = &allocator;
    remove_ = [&allocator, slot] { allocator.remove_event_sink(slot); };
  }

  /// Stops counting; the figures are kept.
  void detach();

  /// Bytes per category: every category seen, and "unknown" always.
  [[nodiscard]] CategoryStats stats() const;

  /// Sets every category's peak to its current bytes (the events of calls made before it counted).
  void reset_peaks();

 private:
  // Has the allocator deliver the events it buffered (attach_mutex_, never under its locks).
  void deliver() const;

  // The event sink: one lock per batch. An event that finds no memory to count a new category
  // in goes uncounted.
  static void sink_events(void* user, std::span<const AllocatorEvent> events) noexcept;

  // Adds to category `id` (mutex_ held); false when out of memory (the event goes uncounted).
  bool add(std::uint32_t id, std::int64_t requested, std::int64_t allocated) noexcept;

  // Taken by the sink while the allocator delivers events (it then holds none of its own locks)
  // and by readers.
  mutable std::mutex mutex_;
  std::vector<CategoryStat> by_id_;  // index = category id (0 = unknown)
  // Ids are those of the process's string table, which also holds annotation names and user
  // metadata: only ids that some block carried as its category are categories.
  std::vector<bool> used_;

  mutable std::mutex attach_mutex_;  // never taken under the allocator's lock
  const void* allocator_ = nullptr;
  std::function<void()> remove_;
  std::function<void()> flush_;  // has the allocator deliver its buffered events
};

namespace detail {

/// The ledgers of the default allocators (never destroyed: allocators outlive statics).
class DefaultCategoryLedgers {
 public:
  static DefaultCategoryLedgers& instance();

  /// From now on every default allocator, existing or created later, has a ledger.
  void enable() {
    if (!enabled_.load(std::memory_order_acquire)) enable_all();
  }

  /// The ledger of `allocator`, attached on first use.
  CategoryLedger& ledger_of(DeviceAllocator& allocator);

 private:
  void enable_all();
  static void on_created(DeviceAllocator& a);

  std::atomic<bool> enabled_{false};
  std::mutex enable_mutex_;
  std::mutex mutex_;
  std::unordered_map<const DeviceAllocator*, std::unique_ptr<CategoryLedger>> ledgers_;
};

}  // namespace detail

/// Requested and allocated bytes per memory category of the default allocator of `device`,
/// current and peak (see the header comment for when peaks start).
[[nodiscard]] CategoryStats category_stats(const Device& device = Device());

/// Sets the peak of every category of `device`'s default allocator to its current bytes.
void reset_category_peaks(const Device& device = Device());

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/history.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/history/category_ledger-inl.hpp"
#endif
