// Layer 3: building snapshots -- snapshot(allocator): the allocator (layer 2) knows nothing of
// snapshots; this reads it through with_lock_then and its views.
//
// Like torch.cuda.memory._snapshot(): segments in address order with their blocks and states,
// per-block frames (the allocating stack) and per-segment frames, the device trace oldest
// first, the allocator settings under PyTorch 2.11's keys, and the external annotations.
// Segments and the recording are copied under the allocator's lock (with_lock); symbols, frames and times
// are resolved after it is released, so allocation continues meanwhile.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// PyTorch 2.11's allocator_settings for `config` (same keys, same order).
[[nodiscard]] std::vector<std::pair<std::string, SettingValue>> allocator_settings(const AllocatorConfig& config);

namespace detail {
/// The snapshot of `segments` (any order) and a recording copy, outside any lock.
Snapshot build_snapshot(int device, std::vector<SegmentView> segments, const HistoryCopy& history,
                        const AllocatorConfig& config);
}  // namespace detail

/// torch.cuda.memory._snapshot() for `allocator`: its segments and, when its recorder (see
/// history_recorder_of) is recording, the history -- read together under the allocator's lock.
template <DeviceBackend B>
[[nodiscard]] Snapshot snapshot(const CachingAllocator<B>& allocator) {
  std::vector<SegmentView> views;
  detail::HistoryCopy history;
  HistoryRecorder* recorder = history_recorder_of(allocator);
  // The segments under the lock; the history once the events before it reached the recorder.
  allocator.with_lock_then(
      [&](const typename CachingAllocator<B>::LockedView& locked) {
        std::size_t active = 0;
        locked.visit_segments([&](SegmentView v) {
          for (const BlockView& b : v.blocks) {
            if (b.state != BlockState::inactive) active += b.size;
          }
          views.push_back(std::move(v));
        });
        return active;
      },
      [&](std::size_t active) {
        // Like PyTorch, a snapshot is itself an event: size = active bytes at that moment.
        if (recorder != nullptr) recorder->snapshot_into(active, history);
        return 0;
      });
  Snapshot snap = detail::build_snapshot(allocator.device_index(), std::move(views), history, allocator.config());
  snap.device_memory.push_back(device_memory(allocator));  // read after the lock: it asks the device
  return snap;
}

/// torch.cuda.memory._snapshot(device) for the default allocator of `device`.
[[nodiscard]] Snapshot snapshot(const Device& device = Device());

/// One snapshot of several devices' default allocators, as PyTorch writes a process with several
/// GPUs: the segments of every device (each names its device) and one device_traces list per
/// device index. The devices must have distinct indices (cuda:0 and sim:0 cannot share a file);
/// the allocator settings are the first device's.
[[nodiscard]] Snapshot snapshot_devices(const std::vector<Device>& devices);

#ifdef GPUMEMPROF_COMPILED_LIB
// The default allocators' type: its snapshot is compiled in the library (lib/history.cpp).
extern template Snapshot snapshot<AnyBackend>(const CachingAllocator<AnyBackend>&);
#endif

GPUMEMPROF_NAMESPACE_END

// The bodies of the non-template functions: in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/history.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/history/snapshot_builder-inl.hpp"
#endif
