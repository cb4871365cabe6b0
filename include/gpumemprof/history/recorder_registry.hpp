// Layer 3: which HistoryRecorder records which allocator. The history layer owns this map, so
// the allocator knows nothing of recorders: snapshots, OOM reports and the profiler find an
// allocator's recorder here (history_recorder_of), whether it is recording now or not.
#pragma once

#include <map>
#include <mutex>
#include <stdexcept>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class HistoryRecorder;

namespace detail {

/// Allocator identity (its address) -> the recorder attached to it. One recorder per allocator.
class RecorderRegistry {
 public:
  static RecorderRegistry& instance() {
    static auto* registry = new RecorderRegistry();  // never destroyed: recorders may outlive statics
    return *registry;
  }
  /// Throws std::logic_error when another recorder is attached to `allocator`.
  void add(const void* allocator, HistoryRecorder* recorder) {
    std::lock_guard lock(mutex_);
    HistoryRecorder*& slot = map_[allocator];
    if (slot != nullptr && slot != recorder) {
      throw std::logic_error("HistoryRecorder::attach: the allocator already has a recorder attached");
    }
    slot = recorder;
  }
  void remove(const void* allocator, const HistoryRecorder* recorder) {
    std::lock_guard lock(mutex_);
    if (auto it = map_.find(allocator); it != map_.end() && it->second == recorder) map_.erase(it);
  }
  [[nodiscard]] HistoryRecorder* find(const void* allocator) const {
    std::lock_guard lock(mutex_);
    auto it = map_.find(allocator);
    return it != map_.end() ? it->second : nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::map<const void*, HistoryRecorder*> map_;
};

}  // namespace detail

/// The recorder attached to `allocator` (recording or not); nullptr when none.
template <DeviceBackend B>
[[nodiscard]] HistoryRecorder* history_recorder_of(const CachingAllocator<B>& allocator) {
  return detail::RecorderRegistry::instance().find(&allocator);
}

GPUMEMPROF_NAMESPACE_END
