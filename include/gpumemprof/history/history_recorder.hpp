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
// recording off it is no sink at all, so the allocator's hot path pays nothing. Its event
// function runs under the allocator's lock, so it stays cheap: a clock read and a 48-byte store
// into the ring (trace_ring.hpp); with stacks, a cached stack walk and one hash probe to intern
// the stack (stack_table.hpp). The id of the allocating stack goes back to the allocator as the
// block's context handle; the snapshot turns handles and ids into frames later. The recorder's
// state has its own lock, taken inside the allocator's (never the other way round); attaching
// registers the recorder in the history layer's registry (recorder_registry.hpp).
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
    set_sink_ = [&allocator, this, slot = std::size_t{0}](bool on) mutable {
      if (on) {
        slot = allocator.add_event_sink({&HistoryRecorder::sink_event, this});
      } else {
        allocator.remove_event_sink(slot);
      }
    };
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
  }

  /// Applies record_memory_history semantics: enabled=off stops recording and clears events,
  /// stacks and annotations; otherwise (re)starts recording with these options.
  void set_options(const HistoryOptions& options) {
    if (options.enabled != HistoryEnabled::off && options.context != HistoryContext::none &&
        options.stacks == HistoryStacks::cpp) {
      warn_stacks_unavailable();
    }
    std::lock_guard attach(attach_mutex_);
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
  /// recording, when recording. Call it under the allocator's lock (with_lock), so that the
  /// copy and the segments read there agree.
  void snapshot_into(std::size_t active_bytes, detail::HistoryCopy& out) {
    std::lock_guard lock(mutex_);
    if (!recording_) return;
    AllocatorEvent e;
    e.action = TraceAction::snapshot;
    e.size = active_bytes;
    record(e);
    copy_locked(out);
  }

  /// Copies the recording.
  void copy_recording(detail::HistoryCopy& out) const {
    std::lock_guard lock(mutex_);
    copy_locked(out);
  }

  /// Trace entries of a copy, oldest first; frames shared through `frames`.
  static std::vector<TraceEntry> trace_entries(const detail::HistoryCopy& copy, detail::FrameResolver& frames,
                                               const TraceClock::Converter& clock) {
    std::uint32_t max_md = 0;
    for (const auto& e : copy.entries) max_md = std::max({max_md, e.metadata, e.category});
    const std::vector<std::string> metadata = detail::MetadataStrings::instance().lookup_all(max_md);
    std::vector<TraceEntry> out(copy.entries.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const detail::RawTraceEntry& e = copy.entries[i];
      TraceEntry& t = out[i];
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

  // The event sink: under the allocator's lock, then the recorder's.
  static std::uint64_t sink_event(void* user, const AllocatorEvent& e) noexcept {
    auto* self = static_cast<HistoryRecorder*>(user);
    std::lock_guard lock(self->mutex_);
    try {
      return self->record(e);
    } catch (...) {  // out of memory while interning a stack: the event goes unrecorded
      return 0;
    }
  }

  // Records one event; the caller holds mutex_.
  std::uint64_t record(const AllocatorEvent& e) {
    if (GPUMEMPROF_UNLIKELY(!recording_ || e.action == TraceAction::category_change)) return 0;  // no trace action
    std::uint64_t handle = 0;
    std::uint32_t stack = 0;
    if (capture_) stack = stack_for(e, handle);
    // A free_completed reported by deallocate() itself directly follows its free_requested:
    // same time. Otherwise read the clock, never going back (TSCs of two cores may disagree).
    if (e.action != TraceAction::free_completed || e.deferred) {
      const TraceClock::Tick t = TraceClock::now();
      if (GPUMEMPROF_LIKELY(t > last_tick_)) last_tick_ = t;
    }
    const TraceClock::Tick t = last_tick_;
    ring_.push({e.addr, e.size, e.stream.id, t, stack, detail::thread_user_metadata, e.category, e.action});
    return handle;
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

  // Adds or removes the event sink; the caller holds attach_mutex_.
  void set_sink_locked(bool on) {
    if (!set_sink_ || on == sink_on_) return;
    set_sink_(on);
    sink_on_ = on;
  }

  struct Pending {  // the stack captured by the previous event, for the next one of the same call
    TraceAction action = TraceAction::snapshot;
    std::uintptr_t addr = 0;
    std::uintptr_t thread = 0;
    std::uint32_t stack = 0;
  };

  // Applies options; the caller holds mutex_ (or is the constructor).
  void configure(const HistoryOptions& o) {
    options_ = o;
    options_.stack_depth = std::min(o.stack_depth, kMaxDepth);
    pending_ = {};
    if (o.enabled == HistoryEnabled::off) {
      recording_ = false;
      capture_ = false;
      ring_.reset(1);
      stacks_.clear();
      ++generation_;  // context handles of live blocks now resolve to nothing
      if (generation_ == 0) generation_ = 1;
      return;
    }
    recording_ = true;
    capture_ = stacks_available && o.stacks == HistoryStacks::cpp && o.context != HistoryContext::none &&
               options_.stack_depth > 0;
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

  // The stack for event `e`'s trace entry (PyTorch's RecordContext rules); sets `handle` for
  // alloc/segment_alloc. One capture per allocator call: segment_alloc's stack serves the
  // alloc that follows it, free_requested's the free_completed of the same deallocate().
  GPUMEMPROF_NOINLINE std::uint32_t stack_for(const AllocatorEvent& e, std::uint64_t& handle) {
    const auto thread = reinterpret_cast<std::uintptr_t>(&detail::thread_user_metadata);
    const Pending prev = std::exchange(pending_, Pending{});
    const auto follows = [&](TraceAction a) {
      return prev.action == a && prev.addr == e.addr && prev.thread == thread && prev.stack != 0;
    };
    const HistoryContext ctx = options_.context;
    const bool on_events = ctx >= HistoryContext::alloc;
    switch (e.action) {
      case TraceAction::alloc: {
        const std::uint32_t id = follows(TraceAction::segment_alloc) ? prev.stack : capture();
        handle = handle_of(id);
        return on_events ? id : 0;
      }
      case TraceAction::segment_alloc:
      case TraceAction::segment_map: {
        const std::uint32_t id = capture();
        handle = handle_of(id);
        pending_ = {TraceAction::segment_alloc, e.addr, thread, id};
        return on_events ? id : 0;
      }
      case TraceAction::free_requested:
        if (ctx == HistoryContext::all) {
          const std::uint32_t id = capture();
          pending_ = {TraceAction::free_requested, e.addr, thread, id};
          return id;
        }
        return on_events ? stack_of(e.context) : 0;
      case TraceAction::free_completed:
        // In deallocate() itself: the free's stack. Later (other streams were using the block):
        // the allocation's stack, as in PyTorch.
        if (ctx == HistoryContext::all && !e.deferred && follows(TraceAction::free_requested)) return prev.stack;
        return on_events ? stack_of(e.context) : 0;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap:
        if (ctx == HistoryContext::all) return capture();
        return on_events ? stack_of(e.context) : 0;
      case TraceAction::oom: return on_events ? capture() : 0;
      case TraceAction::snapshot:
      case TraceAction::category_change: return 0;
    }
    return 0;
  }

  // Interns the current stack. Only this frame is skipped for sure (the callers above it may
  // have been tail-called or inlined); the snapshot drops the library's frames by name.
  GPUMEMPROF_NOINLINE std::uint32_t capture() {
    std::uintptr_t raw[kMaxDepth + kInternalFrames];
    const std::size_t n = capture_stack(raw, options_.stack_depth + kInternalFrames, /*skip=*/1);
    return stacks_.intern(raw, n);
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
  Pending pending_;
  detail::TraceRing ring_;
  detail::StackTable stacks_;

  int device_ = 0;
  mutable std::mutex mutex_;

  // Guarded by attach_mutex_, which is never taken under the allocator's lock.
  std::mutex attach_mutex_;
  const void* allocator_ = nullptr;     // identity only, for the registry
  std::function<void(bool)> set_sink_;  // adds/removes the sink on the attached allocator
  bool sink_on_ = false;

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
