// Layer 3: recording allocation history (torch.cuda.memory._record_memory_history).
//
//   gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all, .max_entries = 100000});
//   ... allocate and free on the default device ...
//   gmp::dump_snapshot("mem.pickle");                  // export/formats/dump_snapshot.hpp
//
// or, for an allocator of your own:
//
//   gmp::HistoryRecorder recorder({.context = gmp::HistoryContext::alloc});
//   recorder.attach(alloc);                            // destroy the recorder before `alloc`
//   gmp::Snapshot s = gmp::snapshot(alloc);           // history/snapshot_builder.hpp
//
// While recording, HistoryRecorder is one of the allocator's event sinks (event_sinks.hpp); with
// recording off it is no sink at all, so the allocator's hot path pays nothing. No part of it
// runs under an allocator lock: with stacks, `prepare` walks the calling thread's stack (cached,
// unwind_cache.hpp) at the entry of an allocator call and interns it (stack_table.hpp) -- its id
// goes back to the allocator as the context handle of the blocks the call creates; the
// allocator buffers the call's events per stream and tells them to `on_events` afterwards in
// batches, in its serial order, each with its time stamp and the stack prepared for it, and the
// recorder stores 48 bytes per event in the ring (trace_ring.hpp) under one lock per batch.
// Without stacks the sink has no `prepare`, so the allocator's calls do not call it. The snapshot turns handles and ids
// into frames later. Readers (trace(), snapshots) first have the allocator deliver what it buffered. Attaching
// registers the recorder in the history layer's registry (recorder_registry.hpp).
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/history/annotations.hpp"
#include "gpumemprof/history/history_options.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/python_frames.hpp"
#include "gpumemprof/history/recorder_registry.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/history/stack_table.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/history/trace_clock.hpp"
#include "gpumemprof/history/trace_ring.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

class FrameResolver;  // frame_resolver.hpp

/// A context handle is (recording generation << 32 | stack id): handles from a recording that
/// was since cleared resolve to no stack.
[[nodiscard]] inline std::uint32_t stack_of_handle(std::uint64_t handle, std::uint32_t generation) noexcept {
  return handle >> 32 == generation ? static_cast<std::uint32_t>(handle) : 0;
}

/// A recorder's state, copied under the allocator's lock for a snapshot; turned into frames
/// and times after the lock is released.
struct HistoryCopy {
  int device = 0;
  std::uint32_t generation = 0;
  std::size_t stack_depth = 0;
  std::vector<RawTraceEntry> entries;  // oldest first
  StackTable stacks;
  std::vector<RawAnnotation> annotations;

  /// The stack id behind a context handle of this recording (0 for older recordings).
  [[nodiscard]] std::uint32_t stack_of(std::uint64_t handle) const noexcept {
    return stack_of_handle(handle, generation);
  }
};

}  // namespace detail

class HistoryRecorder final : private detail::AnnotationSink {
 public:
  /// A recorder with `options` for device index `device` (attach() sets it from the allocator).
  explicit HistoryRecorder(const HistoryOptions& options = {}, int device = 0);

  /// Detaches from the allocator: destroy the recorder before the allocator it is attached to.
  ~HistoryRecorder();
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  /// Records `allocator` (while enabled): the recorder becomes one of its event sinks and its
  /// registered recorder (history_recorder_of). A recorder serves one allocator, an allocator
  /// has one recorder; both throw std::logic_error otherwise.
  template <DeviceBackend B>
  void attach(CachingAllocator<B>& allocator) {
    std::lock_guard lock(attach_mutex_);
    if (allocator_ == &allocator) return;
    if (allocator_ != nullptr) throw std::logic_error("HistoryRecorder::attach: already attached to another allocator");
    detail::RecorderRegistry::instance().add(&allocator, this);
    allocator_ = &allocator;
    // `prepare` only while stacks are captured: without, the allocator's calls skip the sink.
    set_sink_ = [&allocator, this, slot = std::size_t{0}](bool on, bool was_on, bool prepare) mutable {
      const AllocatorEventSink sink{&HistoryRecorder::sink_events, this,
                                    prepare ? &HistoryRecorder::prepare_event : nullptr};
      if (!on) {
        allocator.remove_event_sink(slot);
      } else if (was_on) {
        allocator.replace_event_sink(slot, sink);
      } else {
        slot = allocator.add_event_sink(sink);
      }
    };
    flush_ = [&allocator] { allocator.flush_events(); };
    {
      std::lock_guard state(mutex_);
      device_ = allocator.device_index();
    }
    set_sink_locked(enabled());
  }

  /// Stops recording the attached allocator and forgets it; the recording is kept, and attach()
  /// may follow.
  void detach();

  /// Applies record_memory_history semantics: enabled=off stops recording and clears events,
  /// stacks and annotations; otherwise (re)starts recording with these options.
  void set_options(const HistoryOptions& options);

  [[nodiscard]] HistoryOptions options() const {
    std::lock_guard lock(mutex_);
    return options_;
  }
  /// PyTorch's isHistoryEnabled.
  [[nodiscard]] bool enabled() const {
    std::lock_guard lock(mutex_);
    return recording_;
  }
  [[nodiscard]] int device() const {
    std::lock_guard lock(mutex_);
    return device_;
  }
  /// Events overwritten because the ring was full, since recording (re)started.
  [[nodiscard]] std::size_t dropped_entries() const;

  /// The recorded events, oldest first, with frames and times (PyTorch's device trace).
  [[nodiscard]] std::vector<TraceEntry> trace() const;

  /// The external annotations recorded, oldest first.
  [[nodiscard]] std::vector<Annotation> annotations() const;

  /// The frames of a context handle (BlockView::context, SegmentView::context); nullptr when
  /// it has none or belongs to a recording since cleared.
  [[nodiscard]] Frames frames_of(std::uint64_t context) const;

  /// The frames of many context handles at once; handles of one call site share one Frames.
  [[nodiscard]] std::vector<Frames> frames_of(const std::vector<std::uint64_t>& contexts) const;

  // --- For the snapshot builder ----------------------------------------------------------------
  /// Records PyTorch's snapshot event (size = the active bytes at that moment) and copies the
  /// recording, when recording. Call it from the `then` of the allocator's with_lock_then, so
  /// that the copy and the segments read under the lock agree.
  void snapshot_into(std::size_t active_bytes, detail::HistoryCopy& out);

  /// Copies the recording (with every event the allocator buffered before the call).
  void copy_recording(detail::HistoryCopy& out) const;

  /// Trace entries of a copy, oldest first; frames shared through `frames`. Category changes
  /// are no trace entries (category_changes() gives them).
  static std::vector<TraceEntry> trace_entries(const detail::HistoryCopy& copy, detail::FrameResolver& frames,
                                               const TraceClock::Converter& clock);

  /// The category changes of a copy, oldest first, each placed among trace_entries() by its
  /// trace_index (Snapshot::category_changes).
  static std::vector<CategoryChange> category_changes(const detail::HistoryCopy& copy,
                                                      const TraceClock::Converter& clock);

  /// Annotations of a copy, oldest first, each placed among the copy's trace entries
  /// (Annotation::trace_index).
  static std::vector<Annotation> to_annotations(const detail::HistoryCopy& copy, const TraceClock::Converter& clock);

 private:
  static constexpr std::size_t kInternalFrames = 10;  // recorder and allocator frames, trimmed later
  static constexpr std::size_t kMaxDepth = 128;

  // The event sink: after the allocator's locks, one delivery at a time, in its serial order;
  // one lock per batch.
  static void sink_events(void* user, std::span<const AllocatorEvent> events) noexcept;

  // At the entry of an allocator call, no allocator lock held: the stack the call's events get
  // (PyTorch's RecordContext rules: allocations always, frees and releases with context=all),
  // as a context handle. One capture serves the whole call (a segment_alloc and its alloc, a
  // free_requested and its free_completed, the segment_frees of an empty_cache).
  static std::uint64_t prepare_event(void* user, TraceAction call) noexcept;

  // The strings behind a copy's metadata and category ids (index = id).
  static std::vector<std::string> metadata_of(const detail::HistoryCopy& copy);

  // Records one event; the caller holds mutex_. A category change shares the ring with the trace
  // entries (so it keeps its place among them and ages out with them), its previous category in
  // the metadata field: it has no user metadata of its own.
  void record(const AllocatorEvent& e) noexcept;

  // Copies the recording; the caller holds mutex_.
  void copy_locked(detail::HistoryCopy& out) const;

  // Adds, changes or removes the event sink (it prepares while stacks are captured); the caller
  // holds attach_mutex_.
  void set_sink_locked(bool on);

  // Has the attached allocator deliver what it buffered. Never called under the allocator's
  // delivery lock (sinks do not call it).
  void flush() const;

  // Applies options; the caller holds mutex_ (or is the constructor).
  void configure(const HistoryOptions& o);

  [[nodiscard]] std::uint64_t handle_of(std::uint32_t stack) const noexcept {
    return stack == 0 ? 0 : (std::uint64_t{generation_} << 32) | stack;
  }
  [[nodiscard]] std::uint32_t stack_of(std::uint64_t handle) const noexcept {
    return detail::stack_of_handle(handle, generation_);
  }

  // The stack of event `e`'s trace entry (PyTorch's RecordContext rules): the one prepared for
  // the call that caused it, or -- for frees without context=all and frees completed later --
  // the allocation's (its context handle).
  [[nodiscard]] std::uint32_t stack_for(const AllocatorEvent& e) const noexcept;

  void on_annotation(const detail::RawAnnotation& a) override;

  void copy_annotations(detail::HistoryCopy& out) const;

  // Guarded by mutex_.
  HistoryOptions options_;
  bool recording_ = false;
  bool capture_ = false;
  std::uint32_t generation_ = 1;
  TraceClock::Tick last_tick_ = 0;
  detail::TraceRing ring_;
  detail::StackTable stacks_;

  int device_ = 0;
  mutable std::mutex mutex_;
  // What prepare_event reads without mutex_: 0 no stacks, 1 allocations only, 2 every call.
  std::atomic<int> capture_level_{0};
  std::atomic<std::size_t> capture_depth_{0};
  std::atomic<HistoryStacks> capture_kind_{HistoryStacks::none};

  // Guarded by attach_mutex_, which is never taken under the allocator's locks.
  mutable std::mutex attach_mutex_;
  const void* allocator_ = nullptr;                 // identity only, for the registry
  std::function<void(bool, bool, bool)> set_sink_;  // (on, was on, prepare): the sink on the attached allocator
  std::function<void()> flush_;                     // has the attached allocator deliver its events
  bool sink_on_ = false;
  bool sink_prepares_ = false;

  mutable std::mutex annotations_mutex_;
  std::deque<detail::RawAnnotation> annotations_;
  std::atomic<std::size_t> annotation_capacity_{1};
};

/// True when history with options `o` records stacks in this program: C++ frames where this build
/// captures them, Python frames where Python frame hooks are installed (python_frames.hpp).
[[nodiscard]] inline bool stacks_captured(const HistoryOptions& o) noexcept {
  if (o.enabled == HistoryEnabled::off || o.context == HistoryContext::none || o.stacks == HistoryStacks::none) {
    return false;
  }
  const detail::PythonFrameHooks* hooks = detail::python_frame_hooks.load(std::memory_order_acquire);
  return stacks_available || (o.stacks != HistoryStacks::cpp && hooks != nullptr && hooks->capture != nullptr);
}

/// The recorder of default_allocator(device): created on first use, never destroyed.
[[nodiscard]] HistoryRecorder& default_history_recorder(const Device& device = Device());

/// torch.cuda.memory._record_memory_history for the default allocator of `device`:
/// `{.enabled = HistoryEnabled::off}` stops recording and clears the history.
void record_memory_history(const HistoryOptions& options = {}, const Device& device = Device());

/// The same with PyTorch's strings: enabled "state"/"all"/"none", context
/// "state"/"alloc"/"all"/"none", stacks "python"/"all"/"cpp"/"none". Throws ConfigError.
/// (A template, so that record_memory_history({}, device) means the options overload.)
template <class Text>
requires std::convertible_to<const Text&, std::string_view>
inline void record_memory_history(const Text& enabled, std::string_view context = "all",
                                  std::string_view stacks = "all",
                                  std::size_t max_entries = std::numeric_limits<std::size_t>::max(),
                                  const Device& device = Device()) {
  HistoryOptions o;
  o.enabled = parse_history_enabled(enabled);
  o.context = parse_history_context(context);
  o.stacks = parse_history_stacks(stacks);
  o.max_entries = max_entries;
  record_memory_history(o, device);
}

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/history.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/history/history_recorder-inl.hpp"
#endif
