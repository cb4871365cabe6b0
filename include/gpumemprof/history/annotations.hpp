// Layer 3: external annotations -- named ranges shown on the memory viewer's timeline
// (PyTorch's external_annotations, START/END with device and time_us).
//
//   { auto range = gmp::annotate("forward"); ... }   // START now, END at scope exit
//
// Like PyTorch, annotations are recorded only while history is enabled; each recording
// allocator keeps its own copy, tagged with its device, so every device's snapshot shows the
// ranges on its own timeline.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/trace_clock.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// An annotation before time conversion; the name is a MetadataStrings id.
struct RawAnnotation {
  std::uint32_t name = 0;
  bool start = true;
  TraceClock::Tick tick = 0;
};

/// Receives annotations while registered (a recording HistoryRecorder).
class AnnotationSink {
 public:
  virtual void on_annotation(const RawAnnotation& a) = 0;

 protected:
  ~AnnotationSink() = default;
};

/// The sinks that receive annotations now.
class AnnotationSinks {
 public:
  static AnnotationSinks& instance() {
    static auto* s = new AnnotationSinks();  // never destroyed: recorders may outlive statics
    return *s;
  }

  void add(AnnotationSink* sink) {
    std::lock_guard lock(mutex_);
    if (std::find(sinks_.begin(), sinks_.end(), sink) == sinks_.end()) sinks_.push_back(sink);
    count_.store(sinks_.size(), std::memory_order_relaxed);
  }
  void remove(AnnotationSink* sink) {
    std::lock_guard lock(mutex_);
    sinks_.erase(std::remove(sinks_.begin(), sinks_.end(), sink), sinks_.end());
    count_.store(sinks_.size(), std::memory_order_relaxed);
  }

  /// False while no history is recorded: annotating is then nearly free.
  [[nodiscard]] bool active() const noexcept { return count_.load(std::memory_order_relaxed) != 0; }

  void emit(std::uint32_t name, bool start) {
    if (!active()) return;
    std::lock_guard lock(mutex_);
    const TraceClock::Tick now = TraceClock::now();
    for (AnnotationSink* s : sinks_) s->on_annotation({name, start, now});
  }

 private:
  AnnotationSinks() = default;
  std::mutex mutex_;
  std::vector<AnnotationSink*> sinks_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace detail

/// Records one annotation event: `start` true for START, false for END.
inline void record_annotation(std::string_view name, bool start) {
  auto& sinks = detail::AnnotationSinks::instance();
  if (sinks.active()) sinks.emit(detail::MetadataStrings::instance().intern(name), start);
}

/// A named range: START when constructed, END when destroyed. Nest freely.
class [[nodiscard]] AnnotationRange {
 public:
  explicit AnnotationRange(std::string_view name) {
    auto& sinks = detail::AnnotationSinks::instance();
    if (!sinks.active()) return;  // nothing records: no END either
    name_ = detail::MetadataStrings::instance().intern(name);
    sinks.emit(name_, true);
  }
  ~AnnotationRange() {
    if (name_ != 0) detail::AnnotationSinks::instance().emit(name_, false);
  }
  AnnotationRange(const AnnotationRange&) = delete;
  AnnotationRange& operator=(const AnnotationRange&) = delete;

 private:
  std::uint32_t name_ = 0;
};

/// `auto range = gmp::annotate("optimizer.step");` -- see AnnotationRange.
[[nodiscard]] inline AnnotationRange annotate(std::string_view name) { return AnnotationRange(name); }

GPUMEMPROF_NAMESPACE_END
