// Layer 3: the bodies of HistoryRecorder and of the default allocators' recorders. Included by
// history_recorder.hpp in header-only mode; compiled once in the library (lib/history.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/frame_resolver.hpp"
#include "gpumemprof/history/history_recorder.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC HistoryRecorder::HistoryRecorder(const HistoryOptions& options, int device) : device_(device) {
  set_options(options);
}

GPUMEMPROF_FUNC HistoryRecorder::~HistoryRecorder() {
  detail::AnnotationSinks::instance().remove(this);
  detach();
}

GPUMEMPROF_FUNC void HistoryRecorder::detach() {
  std::lock_guard lock(attach_mutex_);
  set_sink_locked(false);
  if (allocator_ != nullptr) detail::RecorderRegistry::instance().remove(allocator_, this);
  allocator_ = nullptr;
  set_sink_ = nullptr;
  flush_ = nullptr;
}

GPUMEMPROF_FUNC void HistoryRecorder::set_options(const HistoryOptions& options) {
  if (options.enabled != HistoryEnabled::off && options.context != HistoryContext::none &&
      options.stacks != HistoryStacks::none && !stacks_captured(options)) {
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

GPUMEMPROF_FUNC std::size_t HistoryRecorder::dropped_entries() const {
  flush();
  std::lock_guard lock(mutex_);
  return ring_.dropped();
}

GPUMEMPROF_FUNC std::vector<TraceEntry> HistoryRecorder::trace() const {
  detail::HistoryCopy copy;
  copy_recording(copy);
  detail::FrameResolver frames(copy.stacks, copy.stack_depth);
  return trace_entries(copy, frames, TraceClock::converter());
}

GPUMEMPROF_FUNC std::vector<Annotation> HistoryRecorder::annotations() const {
  detail::HistoryCopy copy;
  copy_recording(copy);  // the entries too: they place the annotations (trace_index)
  return to_annotations(copy, TraceClock::converter());
}

GPUMEMPROF_FUNC Frames HistoryRecorder::frames_of(std::uint64_t context) const {
  return frames_of(std::vector{context}).front();
}

GPUMEMPROF_FUNC std::vector<Frames> HistoryRecorder::frames_of(const std::vector<std::uint64_t>& contexts) const {
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

GPUMEMPROF_FUNC void HistoryRecorder::snapshot_into(std::size_t active_bytes, detail::HistoryCopy& out) {
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

GPUMEMPROF_FUNC void HistoryRecorder::copy_recording(detail::HistoryCopy& out) const {
  flush();
  std::lock_guard lock(mutex_);
  copy_locked(out);
}

GPUMEMPROF_FUNC std::vector<TraceEntry> HistoryRecorder::trace_entries(const detail::HistoryCopy& copy,
                                                                       detail::FrameResolver& frames,
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

GPUMEMPROF_FUNC std::vector<CategoryChange> HistoryRecorder::category_changes(const detail::HistoryCopy& copy,
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

GPUMEMPROF_FUNC std::vector<Annotation> HistoryRecorder::to_annotations(const detail::HistoryCopy& copy,
                                                                        const TraceClock::Converter& clock) {
  // Each annotation's place among the trace entries, by tick (times in microseconds tie within
  // a short step): a START precedes the entries of its tick, an END follows them.
  std::vector<TraceClock::Tick> ticks;
  ticks.reserve(copy.entries.size());
  for (const detail::RawTraceEntry& e : copy.entries) {
    if (e.action != TraceAction::category_change) ticks.push_back(e.tick);
  }
  std::vector<Annotation> out;
  out.reserve(copy.annotations.size());
  for (const auto& a : copy.annotations) {
    const auto at = a.start ? std::lower_bound(ticks.begin(), ticks.end(), a.tick)
                            : std::upper_bound(ticks.begin(), ticks.end(), a.tick);
    out.push_back({detail::MetadataStrings::instance().lookup(a.name), a.start, copy.device, clock.to_us(a.tick),
                   static_cast<std::int64_t>(at - ticks.begin())});
  }
  return out;
}

GPUMEMPROF_FUNC void HistoryRecorder::sink_events(void* user, std::span<const AllocatorEvent> events) noexcept {
  auto* self = static_cast<HistoryRecorder*>(user);
  std::lock_guard lock(self->mutex_);
  if (!self->recording_) return;
  for (const AllocatorEvent& e : events) self->record(e);
}

GPUMEMPROF_FUNC std::uint64_t HistoryRecorder::prepare_event(void* user, TraceAction call) noexcept {
  auto* self = static_cast<HistoryRecorder*>(user);
  const int level = self->capture_level_.load(std::memory_order_relaxed);
  if (level == 0 || (call != TraceAction::alloc && level < 2)) return 0;
  std::uintptr_t raw[kMaxDepth + kInternalFrames + 2 * detail::kMaxPythonFrames];
  const std::size_t depth = self->capture_depth_.load(std::memory_order_relaxed);
  const HistoryStacks kind = self->capture_kind_.load(std::memory_order_relaxed);
  const detail::PythonFrameHooks* python =
      kind == HistoryStacks::cpp ? nullptr : detail::python_frame_hooks.load(std::memory_order_acquire);
  if (python != nullptr && python->capture == nullptr) python = nullptr;
  std::size_t n = 0;  // the walks: no lock
  // "python" means C++ frames where no interpreter hooks in.
  if (kind != HistoryStacks::python || python == nullptr) {
    n = capture_stack(raw, depth + kInternalFrames, /*skip=*/1);
  }
  if (python != nullptr) n += python->capture(raw + n, 2 * detail::kMaxPythonFrames);
  if (n == 0) return 0;
  std::lock_guard lock(self->mutex_);
  if (!self->capture_) return 0;
  try {
    return self->handle_of(self->stacks_.intern(raw, n));
  } catch (...) {  // out of memory while interning: the call's events get no stack
    return 0;
  }
}

GPUMEMPROF_FUNC std::vector<std::string> HistoryRecorder::metadata_of(const detail::HistoryCopy& copy) {
  std::uint32_t max_md = 0;
  for (const auto& e : copy.entries) max_md = std::max({max_md, e.metadata, e.category});
  return detail::MetadataStrings::instance().lookup_all(max_md);
}

GPUMEMPROF_FUNC void HistoryRecorder::record(const AllocatorEvent& e) noexcept {
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

GPUMEMPROF_FUNC void HistoryRecorder::copy_locked(detail::HistoryCopy& out) const {
  out.device = device_;
  out.generation = generation_;
  out.stack_depth = options_.stack_depth;
  out.entries.clear();
  out.entries.reserve(ring_.size());
  ring_.for_each([&out](const detail::RawTraceEntry& e) { out.entries.push_back(e); });
  out.stacks = stacks_;
  copy_annotations(out);
}

GPUMEMPROF_FUNC void HistoryRecorder::set_sink_locked(bool on) {
  const bool prepare = on && capture_level_.load(std::memory_order_relaxed) != 0;
  if (!set_sink_ || (on == sink_on_ && prepare == sink_prepares_)) return;
  set_sink_(on, sink_on_, prepare);
  sink_on_ = on;
  sink_prepares_ = prepare;
}

GPUMEMPROF_FUNC void HistoryRecorder::flush() const {
  std::lock_guard lock(attach_mutex_);
  if (flush_) flush_();
}

GPUMEMPROF_FUNC void HistoryRecorder::configure(const HistoryOptions& o) {
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
  capture_ = stacks_captured(o) && options_.stack_depth > 0;
  capture_depth_.store(options_.stack_depth, std::memory_order_relaxed);
  capture_kind_.store(o.stacks, std::memory_order_relaxed);
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

GPUMEMPROF_FUNC std::uint32_t HistoryRecorder::stack_for(const AllocatorEvent& e) const noexcept {
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

GPUMEMPROF_FUNC void HistoryRecorder::on_annotation(const detail::RawAnnotation& a) {
  std::lock_guard lock(annotations_mutex_);
  detail::RawAnnotation r = a;
  if (!annotations_.empty() && r.tick < annotations_.back().tick) r.tick = annotations_.back().tick;
  annotations_.push_back(r);
  const std::size_t cap = annotation_capacity_.load(std::memory_order_relaxed);
  while (annotations_.size() > cap) annotations_.pop_front();
}

GPUMEMPROF_FUNC void HistoryRecorder::copy_annotations(detail::HistoryCopy& out) const {
  std::lock_guard lock(annotations_mutex_);
  out.annotations.assign(annotations_.begin(), annotations_.end());
  out.device = device_;
}

// Created on first use, never destroyed (allocators outlive statics).
GPUMEMPROF_FUNC HistoryRecorder& default_history_recorder(const Device& device) {
  static auto* mutex = new std::mutex();
  static auto* recorders = new std::map<std::pair<int, int>, HistoryRecorder*>();
  std::lock_guard lock(*mutex);
  HistoryRecorder*& r = (*recorders)[{static_cast<int>(device.kind()), device.index()}];
  if (r == nullptr) {
    r = new HistoryRecorder(HistoryOptions{.enabled = HistoryEnabled::off}, device.index());
    r->attach(default_allocator(device));
  }
  return *r;
}

GPUMEMPROF_FUNC void record_memory_history(const HistoryOptions& options, const Device& device) {
  default_history_recorder(device).set_options(options);
}

GPUMEMPROF_NAMESPACE_END
