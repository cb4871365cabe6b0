// Layer 3: the bodies of snapshot_builder.hpp's functions. Included by snapshot_builder.hpp in
// header-only mode; compiled once in the library (lib/history.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/frame_resolver.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/history/trace_clock.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC std::vector<std::pair<std::string, SettingValue>> allocator_settings(const AllocatorConfig& config) {
  std::vector<std::pair<std::string, std::int64_t>> divisions;  // keys: interval starts in MiB
  for (std::size_t i = 0; i < kRoundUpPowerOfTwoIntervals; ++i) {
    divisions.emplace_back(std::to_string(std::size_t{1} << i),
                           static_cast<std::int64_t>(config.roundup_power2_divisions[i]));
  }
  std::vector<std::pair<std::string, SettingValue>> s;
  s.emplace_back("PYTORCH_CUDA_ALLOC_CONF", config.source);
  s.emplace_back("max_split_size", config.max_split_size_stat());
  s.emplace_back("garbage_collection_threshold", config.garbage_collection_threshold);
  s.emplace_back("expandable_segments", config.expandable_segments);
  // PyTorch's pinned-memory and capture options, which gpumemprof has not: their defaults.
  s.emplace_back("pinned_num_register_threads", std::int64_t{1});
  s.emplace_back("release_lock_on_cudamalloc", config.release_lock_on_cudamalloc);
  s.emplace_back("pinned_use_cuda_host_register", false);
  s.emplace_back("graph_capture_record_stream_reuse", false);
  s.emplace_back("roundup_power2_divisions", std::move(divisions));
  return s;
}

namespace detail {

GPUMEMPROF_FUNC Snapshot build_snapshot(int device, std::vector<SegmentView> segments, const HistoryCopy& history,
                                        const AllocatorConfig& config) {
  FrameResolver frames(history.stacks, history.stack_depth);
  std::uint32_t max_category = 0;
  for (const SegmentView& v : segments) {
    for (const BlockView& b : v.blocks) max_category = std::max(max_category, b.category);
  }
  const std::vector<std::string> categories = MetadataStrings::instance().lookup_all(max_category);
  const TraceClock::Converter clock = TraceClock::converter();
  Snapshot snap;
  std::sort(segments.begin(), segments.end(),
            [](const SegmentView& a, const SegmentView& b) { return a.address < b.address; });
  snap.segments.reserve(segments.size());
  for (const SegmentView& v : segments) {
    SnapshotSegment& s = snap.segments.emplace_back();
    s.device = device;
    s.address = v.address;
    s.total_size = v.size;
    s.stream = v.stream.id;
    s.is_large = v.is_large;
    s.is_expandable = v.is_expandable;
    s.pool_id = v.pool_id;
    s.frames = frames(history.stack_of(v.context));
    s.blocks.reserve(v.blocks.size());
    for (const BlockView& b : v.blocks) {
      SnapshotBlock& sb = s.blocks.emplace_back();
      sb.address = b.address;
      sb.size = b.size;
      sb.requested_size = b.requested_size;
      sb.state = b.state;
      sb.frames = frames(history.stack_of(b.context));
      if (b.state != BlockState::inactive && b.category < categories.size()) sb.category = categories[b.category];
      if (b.state == BlockState::active_allocated) s.allocated_size += b.size;
      if (b.state != BlockState::inactive) {
        s.active_size += b.size;
        s.requested_size += b.requested_size;
      }
    }
  }
  const auto index = static_cast<std::size_t>(std::max(device, 0));  // device_traces[i]: device i
  snap.device_traces.resize(index + 1);
  snap.device_traces[index] = HistoryRecorder::trace_entries(history, frames, clock);
  if (std::vector<CategoryChange> changes = HistoryRecorder::category_changes(history, clock); !changes.empty()) {
    snap.category_changes.resize(index + 1);
    snap.category_changes[index] = std::move(changes);
  }
  snap.allocator_settings = allocator_settings(config);
  snap.external_annotations = HistoryRecorder::to_annotations(history, clock);
  return snap;
}

}  // namespace detail

GPUMEMPROF_FUNC Snapshot snapshot(const Device& device) { return gpumemprof::snapshot(default_allocator(device)); }

GPUMEMPROF_FUNC Snapshot snapshot_devices(const std::vector<Device>& devices) {
  Snapshot all;
  std::vector<bool> seen;
  for (const Device& d : devices) {
    const auto index = static_cast<std::size_t>(d.index());
    if (index < seen.size() && seen[index]) {
      throw std::invalid_argument("snapshot_devices: two devices with index " + std::to_string(index) + " (" + d.str() +
                                  "): one file holds one trace per device index");
    }
    if (seen.size() <= index) seen.resize(index + 1);
    seen[index] = true;
    Snapshot one = gpumemprof::snapshot(d);
    for (SnapshotSegment& seg : one.segments) all.segments.push_back(std::move(seg));
    if (all.device_traces.size() <= index) all.device_traces.resize(index + 1);
    all.device_traces[index] = std::move(one.device_traces[index]);
    if (index < one.category_changes.size()) {
      if (all.category_changes.size() <= index) all.category_changes.resize(index + 1);
      all.category_changes[index] = std::move(one.category_changes[index]);
    }
    for (Annotation& a : one.external_annotations) all.external_annotations.push_back(std::move(a));
    if (all.allocator_settings.empty()) all.allocator_settings = std::move(one.allocator_settings);
  }
  return all;
}

GPUMEMPROF_NAMESPACE_END
