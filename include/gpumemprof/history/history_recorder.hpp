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
//   gmp::Snapshot s = alloc.snapshot();                // history/snapshot_builder.hpp
//
// While recording, HistoryRecorder is one of the allocator's event sinks (event_sinks.hpp); with
// recording off it is no sink at all, so the allocator's hot path pays nothing. No part of it
// runs under an allocator lock: with stacks, `prepare` walks the calling thread's stack (cached,
// unwind_cache.hpp) at the entry of an allocator call and interns it (stack_table.hpp) -- its id
// goes back to the allocator as the context handle of the blocks the call creates; the
// allocator buffers the call's events per stream and tells them to `on_events` afterwards in
// batches, in its serial order, each with its time stamp and the stack prepared for it, and the
// recorder stores 48 bytes per event in the ring (trace_ring.hpp) under one lock per batch.
// Without stacks the sink has no `prepare`, so the allocator's calls do not call it. The snapshot turns handles and ids into frames
// later. Readers (trace(), snapshots) first have the allocator deliver what it buffered.
// Attaching registers the recorder in the history layer's registry (recorder_registry.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <mutex>
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
#include "gpumemprof/history/recorder_registry.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/history/stack_table.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/history/trace_clock.hpp"
#include "gpumemprof/history/trace_ring.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

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
  explicit HistoryRecorder(const HistoryOptions& options = {}, int device = 0) : device_(device) {
    set_options(options);
  }

  /// Detaches from the allocator: destroy the recorder before the allocator it is attached to.
  ~HistoryRecorder() {
    detail::AnnotationSinks::instance().remove(this);
    detach();
  }
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
  void detach() {
    std::lock_guard lock(attach_mutex_);
    set_sink_locked(false);
    if (allocator_ != nullptr) detail::RecorderRegistry::instance().remove(allocator_, this);
    allocator_ = nullptr;
    set_sink_ = nullptr;
    flush_ = nullptr;
  }

  /// Applies record_memory_history semantics: enabled=off stops recording and clears events,
  /// stacks and annotations; otherwise (re)starts recording with these options.
  void set_options(const HistoryOptions& options) {
    if (options.enabled != HistoryEnabled::off && options.context != HistoryContext::none &&
        options.stacks == HistoryStacks::cpp) {
      warn_stacks_unavailable();
    }
    std::lock_guard attach(attach_mutex_);
    if (flush_) flush_();  // the events so far belong to the recording being changed
    {
      std::lock_guard lock(mutex_);
      configure(options);
    }
    if (options.enabled == HistoryEnabled::off) {
      detail::AnnotationSinks::instance().remove(this);
      {
        std::lock_guard lock(annotations_mutex_);
        annotations_.clear();
      }
      set_sink_locked(false);
    } else {
      if (options.clear_history) {
        std::lock_guard lock(annotations_mutex_);
        annotations_.clear();
      }
      detail::AnnotationSinks::instance().add(this);
      set_sink_locked(true);
    }
  }

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
  [[nodiscard]] std::size_t dropped_entries() const {
    flush();
    std::lock_guard lock(mutex_);
    return ring_.dropped();
  }

  /// The recorded events, oldest first, with frames and times (PyTorch's device trace).
  [[nodiscard]] std::vector<TraceEntry> trace() const {
    detail::HistoryCopy copy;
    copy_recording(copy);
    detail::FrameResolver frames(copy.stacks, copy.stack_depth);
    return trace_entries(copy, frames, TraceClock::converter());
  }

  /// The external annotations recorded, oldest first.
  [[nodiscard]] std::vector<Annotation> annotations() const {
    detail::HistoryCopy copy;
    copy_annotations(copy);
    return to_annotations(copy, TraceClock::converter());
  }

  /// The frames of a context handle (BlockView::context, SegmentView::context); nullptr when
  /// it has none or belongs to a recording since cleared.
  [[nodiscard]] Frames frames_of(std::uint64_t context) const { return frames_of(std::vector{context}).front(); }

  /// The frames of many context handles at once; handles of one call site share one Frames.
  [[nodiscard]] std::vector<Frames> frames_of(const std::vector<std::uint64_t>& contexts) const {
    detail::StackTable local;  // the stacks wanted, copied under the lock, symbolized after it
    std::vector<std::uint32_t> ids(contexts.size(), detail::StackTable::none);
    std::size_t depth = 0;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < contexts.size(); ++i) {
        const std::uint32_t id = stack_of(contexts[i]);
        if (id == 0 || id > stacks_.size()) continue;
        const auto raw = stacks_.frames(id);
        ids[i] = local.intern(raw.data(), raw.size());
      }
      depth = options_.stack_depth;
    }
    detail::FrameResolver resolve(local, depth);
    std::vector<Frames> out;
    out.reserve(ids.size());
    for (const std::uint32_t id : ids) out.push_back(resolve(id));
    return out;
  }

  // --- For the snapshot builder ----------------------------------------------------------------
  /// Records PyTorch's snapshot event (size = the active bytes at that moment) and copies the
  /// recording, when recording. Call it from the `then` of the allocator's with_lock_then, so
  /// that the copy and the segments read under the lock agree.
  void snapshot_into(std::size_t active_bytes, detail::HistoryCopy& out) {
    std::lock_guard lock(mutex_);
    if (!recording_) return;
    AllocatorEvent e;
    e.action = TraceAction::snapshot;
    e.size = active_bytes;
    e.stamp = TraceClock::now();
    e.metadata = detail::thread_user_metadata;
    record(e);
    copy_locked(out);
  }

  /// Copies the recording (with every event the allocator buffered before the call).
  void copy_recording(detail::HistoryCopy& out) const {
    flush();
    std::lock_guard lock(mutex_);
    copy_locked(out);
  }

  /// Trace entries of a copy, oldest first; frames shared through `frames`. Category changes
  /// are no trace entries (category_changes() gives them).
  static std::vector<TraceEntry> trace_entries(const detail::HistoryCopy& copy, detail::FrameResolver& frames,
                                               const TraceClock::Converter& clock) {
    const std::vector<std::string> metadata = metadata_of(copy);
    std::vector<TraceEntry> out;
    out.reserve(copy.entries.size());
    for (const detail::RawTraceEntry& e : copy.entries) {
      if (e.action == TraceAction::category_change) continue;
      TraceEntry& t = out.emplace_back();
      t.action = e.action;
      t.addr = e.addr;
      t.size = e.size;
      t.stream = e.stream;
      t.time_us = clock.to_us(e.tick);
      if (e.metadata != 0 && e.metadata < metadata.size()) t.user_metadata = metadata[e.metadata];
      if (e.category != 0 && e.category < metadata.size()) {
        t.user_metadata = metadata_with_category(t.user_metadata, metadata[e.category]);
      }
      t.frames = frames(e.stack);
    }
    return out;
  }

  /// The category changes of a copy, oldest first, each placed among trace_entries() by its
  /// trace_index (Snapshot::category_changes).
  static std::vector<CategoryChange> category_changes(const detail::HistoryCopy& copy,
                                                      const TraceClock::Converter& clock) {
    std::vector<CategoryChange> out;
    std::vector<std::string> metadata;
    std::size_t index = 0;  // trace entries so far
    for (const detail::RawTraceEntry& e : copy.entries) {
      if (e.action != TraceAction::category_change) {
        ++index;
        continue;
      }
      if (metadata.empty()) metadata = metadata_of(copy);
      const auto name = [&metadata](std::uint32_t id) { return id < metadata.size() ? metadata[id] : std::string(); };
      out.push_back({index, clock.to_us(e.tick), e.addr, e.size, name(e.category), name(e.metadata)});
    }
    return out;
  }

  /// Annotations of a copy, oldest first.
  static std::vector<Annotation> to_annotations(const detail::HistoryCopy& copy, const TraceClock::Converter& clock) {
    std::vector<Annotation> out;
    out.reserve(copy.annotations.size());
    for (const auto& a : copy.annotations) {
      out.push_back({detail::MetadataStrings::instance().lookup(a.name), a.start, copy.device, clock.to_us(a.tick)});
    }
    return out;
  }

 private:
  static constexpr std::size_t kInternalFrames = 10;  // recorder and allocator frames, trimmed later
  static constexpr std::size_t kMaxDepth = 128;

  // The event sink: after the allocator's locks, one delivery at a time, in its serial order;
  // one lock per batch.
  static void sink_events(void* user, std::span<const AllocatorEvent> events) noexcept {
    auto* self = static_cast<HistoryRecorder*>(user);
    std::lock_guard lock(self->mutex_);
    if (!self->recording_) return;
    for (const AllocatorEvent& e : events) self->record(e);
  }

  // At the entry of an allocator call, no allocator lock held: the stack the call's events get
  // (PyTorch's RecordContext rules: allocations always, frees and releases with context=all),
  // as a context handle. One capture serves the whole call (a segment_alloc and its alloc, a
  // free_requested and its free_completed, the segment_frees of an empty_cache).
  static std::uint64_t prepare_event(void* user, TraceAction call) noexcept {
    auto* self = static_cast<HistoryRecorder*>(user);
    const int level = self->capture_level_.load(std::memory_order_relaxed);
    if (level == 0 || (call != TraceAction::alloc && level < 2)) return 0;
    std::uintptr_t raw[kMaxDepth + kInternalFrames];
    const std::size_t depth = self->capture_depth_.load(std::memory_order_relaxed);
    const std::size_t n = capture_stack(raw, depth + kInternalFrames, /*skip=*/1);  // the walk: no lock
    std::lock_guard lock(self->mutex_);
    if (!self->capture_) return 0;
    try {
      return self->handle_of(self->stacks_.intern(raw, n));
    } catch (...) {  // out of memory while interning: the call's events get no stack
      return 0;
    }
  }

  // The strings behind a copy's metadata and category ids (index = id).
  static std::vector<std::string> metadata_of(const detail::HistoryCopy& copy) {
    std::uint32_t max_md = 0;
    for (const auto& e : copy.entries) max_md = std::max({max_md, e.metadata, e.category});
    return detail::MetadataStrings::instance().lookup_all(max_md);
  }

  // Records one event; the caller holds mutex_. A category change shares the ring with the trace
  // entries (so it keeps its place among them and ages out with them), its previous category in
  // the metadata field: it has no user metadata of its own.
  void record(const AllocatorEvent& e) noexcept {
    if (GPUMEMPROF_UNLIKELY(!recording_)) return;
    if (GPUMEMPROF_UNLIKELY(e.action == TraceAction::category_change)) {
      if (GPUMEMPROF_LIKELY(e.stamp > last_tick_)) last_tick_ = e.stamp;
      ring_.push({e.addr, e.size, e.stream.id, last_tick_, 0, e.previous_category, e.category, e.action});
      return;
    }
    const std::uint32_t stack = capture_ ? stack_for(e) : 0;
    // A free_completed reported by deallocate() itself directly follows its free_requested:
    // same time. Otherwise the event's stamp, never going back.
    if (e.action != TraceAction::free_completed || e.deferred) {
      if (GPUMEMPROF_LIKELY(e.stamp > last_tick_)) last_tick_ = e.stamp;
    }
    ring_.push({e.addr, e.size, e.stream.id, last_tick_, stack, e.metadata, e.category, e.action});
  }

  // Copies the recording; the caller holds mutex_.
  void copy_locked(detail::HistoryCopy& out) const {
    out.device = device_;
    out.generation = generation_;
    out.stack_depth = options_.stack_depth;
    out.entries.clear();
    out.entries.reserve(ring_.size());
    ring_.for_each([&out](const detail::RawTraceEntry& e) { out.entries.push_back(e); });
    out.stacks = stacks_;
    copy_annotations(out);
  }

  // Adds, changes or removes the event sink (it prepares while stacks are captured); the caller
  // holds attach_mutex_.
  void set_sink_locked(bool on) {
    const bool prepare = on && capture_level_.load(std::memory_order_relaxed) != 0;
    if (!set_sink_ || (on == sink_on_ && prepare == sink_prepares_)) return;
    set_sink_(on, sink_on_, prepare);
    sink_on_ = on;
    sink_prepares_ = prepare;
  }

  // Has the attached allocator deliver what it buffered. Never called under the allocator's
  // delivery lock (sinks do not call it).
  void flush() const {
    std::lock_guard lock(attach_mutex_);
    if (flush_) flush_();
  }

  // Applies options; the caller holds mutex_ (or is the constructor).
  void configure(const HistoryOptions& o) {
    options_ = o;
    options_.stack_depth = std::min(o.stack_depth, kMaxDepth);
    if (o.enabled == HistoryEnabled::off) {
      recording_ = false;
      capture_ = false;
      capture_level_.store(0, std::memory_order_relaxed);
      ring_.reset(1);
      stacks_.clear();
      ++generation_;  // context handles of live blocks now resolve to nothing
      if (generation_ == 0) generation_ = 1;
      return;
    }
    recording_ = true;
    capture_ = stacks_available && o.stacks == HistoryStacks::cpp && o.context != HistoryContext::none &&
               options_.stack_depth > 0;
    capture_depth_.store(options_.stack_depth, std::memory_order_relaxed);
    capture_level_.store(!capture_ ? 0 : o.context == HistoryContext::all ? 2 : 1, std::memory_order_relaxed);
    const std::size_t cap = o.enabled == HistoryEnabled::all ? std::max<std::size_t>(o.max_entries, 1) : 1;
    annotation_capacity_.store(cap, std::memory_order_relaxed);  // PyTorch bounds both alike
    if (o.clear_history) {
      ring_.reset(cap);
    } else {
      ring_.set_capacity(cap);
    }
    if (capture_) TraceClock::warm_up();
  }

  [[nodiscard]] std::uint64_t handle_of(std::uint32_t stack) const noexcept {
    return stack == 0 ? 0 : (std::uint64_t{generation_} << 32) | stack;
  }
  [[nodiscard]] std::uint32_t stack_of(std::uint64_t handle) const noexcept {
    return detail::stack_of_handle(handle, generation_);
  }

  // The stack of event `e`'s trace entry (PyTorch's RecordContext rules): the one prepared for
  // the call that caused it, or -- for frees without context=all and frees completed later --
  // the allocation's (its context handle).
  [[nodiscard]] std::uint32_t stack_for(const AllocatorEvent& e) const noexcept {
    const HistoryContext ctx = options_.context;
    const bool on_events = ctx >= HistoryContext::alloc;
    const std::uint32_t prepared = stack_of(e.prepared);
    switch (e.action) {
      case TraceAction::alloc:
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
      case TraceAction::oom: return on_events ? prepared : 0;
      case TraceAction::free_requested:
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        if (ctx == HistoryContext::all) return prepared;
        return on_events ? stack_of(e.context) : 0;
      case TraceAction::free_completed:
        // In deallocate() itself: the free's stack. Later (other streams were using the block):
        // the allocation's, as in PyTorch.
        if (ctx == HistoryContext::all && !e.deferred) return prepared;
        return on_events ? stack_of(e.context) : 0;
      case TraceAction::snapshot:
      case TraceAction::category_change: return 0;
    }
    return 0;
  }

  void on_annotation(const detail::RawAnnotation& a) override {
    std::lock_guard lock(annotations_mutex_);
    detail::RawAnnotation r = a;
    if (!annotations_.empty() && r.tick < annotations_.back().tick) r.tick = annotations_.back().tick;
    annotations_.push_back(r);
    const std::size_t cap = annotation_capacity_.load(std::memory_order_relaxed);
    while (annotations_.size() > cap) annotations_.pop_front();
  }

  void copy_annotations(detail::HistoryCopy& out) const {
    std::lock_guard lock(annotations_mutex_);
    out.annotations.assign(annotations_.begin(), annotations_.end());
    out.device = device_;
  }

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

  // Guarded by attach_mutex_, which is never taken under the allocator's locks.
  mutable std::mutex attach_mutex_;
  const void* allocator_ = nullptr;     // identity only, for the registry
  std::function<void(bool, bool, bool)> set_sink_;  // (on, was on, prepare): the sink on the attached allocator
  std::function<void()> flush_;         // has the attached allocator deliver its events
  bool sink_on_ = false;
  bool sink_prepares_ = false;

  mutable std::mutex annotations_mutex_;
  std::deque<detail::RawAnnotation> annotations_;
  std::atomic<std::size_t> annotation_capacity_{1};
};

namespace detail {
inline HistoryRecorder& default_history_recorder_slot(const Device& device) {
  static auto* mutex = new std::mutex();
  static auto* recorders = new std::map<std::pair<int, int>, HistoryRecorder*>();  // never destroyed
  std::lock_guard lock(*mutex);
  HistoryRecorder*& r = (*recorders)[{static_cast<int>(device.kind()), device.index()}];
  if (r == nullptr) {
    r = new HistoryRecorder(HistoryOptions{.enabled = HistoryEnabled::off}, device.index());
    r->attach(default_allocator(device));
  }
  return *r;
}
}  // namespace detail

/// The recorder of default_allocator(device): created on first use, never destroyed.
[[nodiscard]] inline HistoryRecorder& default_history_recorder(const Device& device = Device()) {
  return detail::default_history_recorder_slot(device);
}

/// torch.cuda.memory._record_memory_history for the default allocator of `device`:
/// `{.enabled = HistoryEnabled::off}` stops recording and clears the history.
inline void record_memory_history(const HistoryOptions& options = {}, const Device& device = Device()) {
  default_history_recorder(device).set_options(options);
}

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
