// Layer 4: MemoryTracker's bodies (tracker.hpp declares them): sampling, the alert rules and the
// event log. Included by that header in header-only mode; compiled once in the library
// (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"
#include "gpumemprof/profiler/tracker.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC MemoryTracker::MemoryTracker(TrackerOptions options)
    : MemoryTracker(make_memory_source(resolve(options), options.level), options) {}

GPUMEMPROF_FUNC MemoryTracker::MemoryTracker(std::shared_ptr<MemorySource> source, const TrackerOptions& options)
    : options_(options), source_(std::move(source)), events_(options.max_events) {
  if (source_ == nullptr) throw std::invalid_argument("MemoryTracker: null memory source");
  capacity_ = static_cast<std::int64_t>(source_->mem_get_info().total);
  if (source_->allocator_level()) peak_window_ = source_->open_peak_window();
}

GPUMEMPROF_FUNC MemoryTracker::~MemoryTracker() {
  sampler_.stop();
  if (peak_window_ != 0) (void)source_->close_peak_window(peak_window_);
}

GPUMEMPROF_FUNC void MemoryTracker::start_tracking() {
  std::lock_guard control(control_);  // one start or stop at a time, from any thread
  if (sampler_.running()) return;
  {
    std::lock_guard lock(mutex_);
    tracking_since_ = std::chrono::steady_clock::now();
  }
  log_marker(TrackingEventType::start, "tracking started");
  sampler_.start(options_.interval, [this] { sample_now(); });
}

GPUMEMPROF_FUNC void MemoryTracker::stop_tracking() {
  std::lock_guard control(control_);
  if (!sampler_.running()) return;
  sampler_.stop();
  {
    std::lock_guard lock(mutex_);
    tracked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - tracking_since_).count();
  }
  log_marker(TrackingEventType::stop, "tracking stopped");
}

GPUMEMPROF_FUNC std::size_t MemoryTracker::add_alert_callback(AlertCallback callback) {
  std::lock_guard lock(mutex_);
  callbacks_.emplace_back(next_callback_id_, std::move(callback));
  return next_callback_id_++;
}

GPUMEMPROF_FUNC void MemoryTracker::remove_alert_callback(std::size_t id) {
  std::lock_guard lock(mutex_);
  std::erase_if(callbacks_, [id](const auto& c) { return c.first == id; });
}

GPUMEMPROF_FUNC void MemoryTracker::set_thresholds(const AlertThresholds& thresholds) {
  std::lock_guard lock(mutex_);
  options_.thresholds = thresholds;
}

GPUMEMPROF_FUNC AlertThresholds MemoryTracker::thresholds() const {
  std::lock_guard lock(mutex_);
  return options_.thresholds;
}

GPUMEMPROF_FUNC void MemoryTracker::sample_now() {
  MemorySnapshot s;
  try {
    s = read_memory(*source_, "tracking", {.cpu_memory = options_.track_cpu_memory, .device_memory = true});
  } catch (const std::exception& e) {
    std::vector<TrackingEvent> alerts;
    {
      std::lock_guard lock(mutex_);
      log(make_event(TrackingEventType::error, s, std::string("sampling failed: ") + e.what()), &alerts);
    }
    fire(std::move(alerts));
    return;
  }
  process(s);
}

GPUMEMPROF_FUNC void MemoryTracker::process(const MemorySnapshot& sample) {
  std::vector<TrackingEvent> alerts;
  {
    std::lock_guard lock(mutex_);
    evaluate(sample, alerts);
  }
  fire(std::move(alerts));
}

GPUMEMPROF_FUNC std::vector<TrackingEvent> MemoryTracker::get_events(std::optional<TrackingEventType> type,
                                                                     std::size_t last_n) const {
  std::vector<TrackingEvent> out;
  {
    std::lock_guard lock(mutex_);
    events_.for_each([&](const TrackingEvent& e) {
      if (!type || e.type == *type) out.push_back(e);
    });
  }
  if (last_n != 0 && out.size() > last_n) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(last_n));
  return out;
}

GPUMEMPROF_FUNC TrackingStatistics MemoryTracker::get_statistics() const {
  std::lock_guard lock(mutex_);
  TrackingStatistics s = stats_;
  s.events = events_.size();
  s.events_dropped = events_.dropped();
  s.tracking_duration = tracked_seconds_;
  if (sampler_.running()) {
    s.tracking_duration += std::chrono::duration<double>(std::chrono::steady_clock::now() - tracking_since_).count();
  }
  s.capacity = capacity_;
  if (peak_window_ != 0) s.peak_memory = std::max(s.peak_memory, source_->peak_window(peak_window_));
  return s;
}

GPUMEMPROF_FUNC void MemoryTracker::clear_events() {
  std::lock_guard lock(mutex_);
  events_.clear();
  stats_ = {};
  have_last_ = false;
  usage_level_ = 0;
  fragmented_ = false;
  if (peak_window_ != 0) {
    (void)source_->close_peak_window(peak_window_);
    peak_window_ = source_->open_peak_window();
  }
}

GPUMEMPROF_FUNC const Device& MemoryTracker::resolve(TrackerOptions& options) {
  if (!options.device) options.device = Device();
  return *options.device;
}

GPUMEMPROF_FUNC std::int64_t MemoryTracker::tracked_value(const MemorySnapshot& s) {
  return s.allocator_level ? s.allocated_memory : s.device_used_memory.value_or(0);
}

GPUMEMPROF_FUNC std::int64_t MemoryTracker::usage_of(const MemorySnapshot& s, UsageMeasure m) const {
  if (!s.allocator_level) m = UsageMeasure::device_used;
  switch (m) {
    case UsageMeasure::allocated: return s.allocated_memory;
    case UsageMeasure::reserved: return s.reserved_memory;
    case UsageMeasure::device_used: return s.device_used_memory.value_or(0);
  }
  return 0;
}

GPUMEMPROF_FUNC double MemoryTracker::limit(double fraction, std::int64_t bytes) const {
  double l = 0.0;
  if (fraction > 0.0 && capacity_ > 0) l = fraction * static_cast<double>(capacity_);
  if (bytes > 0 && (l == 0.0 || static_cast<double>(bytes) < l)) l = static_cast<double>(bytes);
  return l;
}

GPUMEMPROF_FUNC TrackingEvent MemoryTracker::make_event(TrackingEventType type, const MemorySnapshot& s,
                                                        std::string message, AlertKind alert, double value,
                                                        double threshold) const {
  TrackingEvent e;
  e.timestamp = s.timestamp;
  e.type = type;
  e.alert = alert;
  e.memory_allocated = tracked_value(s);
  e.memory_reserved = s.allocator_level ? s.reserved_memory : 0;
  e.memory_change = have_last_ ? tracked_value(s) - last_value_ : 0;
  e.device_id = s.device_id;
  e.message = std::move(message);
  e.value = value;
  e.threshold = threshold;
  e.sample = s;
  return e;
}

GPUMEMPROF_FUNC void MemoryTracker::log(TrackingEvent e, std::vector<TrackingEvent>* alerts) {
  const bool alert = e.type == TrackingEventType::warning || e.type == TrackingEventType::critical ||
                     e.type == TrackingEventType::error;
  if (alert) {
    ++stats_.alert_count;
    if (alerts != nullptr) alerts->push_back(e);
  }
  events_.push(std::move(e));
}

GPUMEMPROF_FUNC void MemoryTracker::log_marker(TrackingEventType type, const char* message) {
  MemorySnapshot s = read_memory(*source_, "tracking", {.device_memory = true});
  std::lock_guard lock(mutex_);
  log(make_event(type, s, message), nullptr);
}

GPUMEMPROF_FUNC void MemoryTracker::evaluate(const MemorySnapshot& s, std::vector<TrackingEvent>& alerts) {
  const AlertThresholds& t = options_.thresholds;
  const std::int64_t value = tracked_value(s);
  const std::int64_t change = have_last_ ? value - last_value_ : 0;
  char text[160];

  ++stats_.samples;
  stats_.current_memory = value;
  if (change > 0) {
    ++stats_.total_allocations;
    stats_.total_allocation_bytes += change;
  } else if (change < 0) {
    ++stats_.total_deallocations;
    stats_.total_deallocation_bytes -= change;
  }
  if (options_.log_changes && change != 0) {
    std::snprintf(text, sizeof text, "memory %s by %s", change > 0 ? "grew" : "shrank",
                  format_size(static_cast<std::uint64_t>(change > 0 ? change : -change)).c_str());
    log(make_event(change > 0 ? TrackingEventType::allocation : TrackingEventType::deallocation, s, text), &alerts);
  }
  if (value > stats_.peak_memory) {
    stats_.peak_memory = value;
    if (options_.log_changes) {
      std::snprintf(text, sizeof text, "new peak: %s", format_size(static_cast<std::uint64_t>(value)).c_str());
      log(make_event(TrackingEventType::peak, s, text), &alerts);
    }
  }

  if (options_.enable_alerts) {
    const auto usage = static_cast<double>(usage_of(s, t.usage));
    const double warn = limit(t.warning_fraction, t.warning_bytes);
    const double crit = limit(t.critical_fraction, t.critical_bytes);
    const int level = crit > 0.0 && usage >= crit ? 2 : warn > 0.0 && usage >= warn ? 1 : 0;
    if (level > usage_level_) {
      const double lim = level == 2 ? crit : warn;
      std::snprintf(text, sizeof text, "%s: memory use %s reached %s (%.1f%% of %s)",
                    level == 2 ? "CRITICAL" : "WARNING", format_size(static_cast<std::uint64_t>(usage)).c_str(),
                    format_size(static_cast<std::uint64_t>(lim)).c_str(),
                    capacity_ > 0 ? 100.0 * usage / static_cast<double>(capacity_) : 0.0,
                    format_size(static_cast<std::uint64_t>(capacity_)).c_str());
      log(make_event(level == 2 ? TrackingEventType::critical : TrackingEventType::warning, s, text, AlertKind::usage,
                     usage, lim),
          &alerts);
    }
    usage_level_ = level;

    if (t.jump_bytes > 0 && change >= t.jump_bytes) {
      std::snprintf(text, sizeof text, "large jump: memory grew by %s in one sample (limit %s)",
                    format_size(static_cast<std::uint64_t>(change)).c_str(),
                    format_size(static_cast<std::uint64_t>(t.jump_bytes)).c_str());
      log(make_event(TrackingEventType::warning, s, text, AlertKind::jump, static_cast<double>(change),
                     static_cast<double>(t.jump_bytes)),
          &alerts);
    }

    if (s.allocator_level && t.fragmentation_ratio > 0.0 && s.reserved_memory >= t.fragmentation_min_reserved) {
      double ratio = 0.0;
      if (t.fragmentation == FragmentationMeasure::external) {
        SegmentFacts u;
        for (const SegmentView& seg : source_->segments()) u += segment_facts(seg);
        ratio = u.external_fragmentation().value_or(0.0);
        std::snprintf(text, sizeof text,
                      "high fragmentation: external %.1f%% (1 - largest free block %s / free %s; limit %.1f%%)",
                      100.0 * ratio, format_size(u.largest_free).c_str(), format_size(u.free).c_str(),
                      100.0 * t.fragmentation_ratio);
      } else {
        const std::int64_t waste = t.fragmentation == FragmentationMeasure::reserved_unallocated
                                       ? s.reserved_memory - s.allocated_memory
                                       : s.inactive_memory;
        ratio = static_cast<double>(waste) / static_cast<double>(s.reserved_memory);
        std::snprintf(
            text, sizeof text, "high fragmentation: %.1f%% of %s reserved is %s (limit %.1f%%)", 100.0 * ratio,
            format_size(static_cast<std::uint64_t>(s.reserved_memory)).c_str(),
            t.fragmentation == FragmentationMeasure::reserved_unallocated ? "not allocated" : "inactive split blocks",
            100.0 * t.fragmentation_ratio);
      }
      const bool fragmented = ratio >= t.fragmentation_ratio;
      if (fragmented && !fragmented_) {
        log(make_event(TrackingEventType::warning, s, text, AlertKind::fragmentation, ratio, t.fragmentation_ratio),
            &alerts);
      }
      fragmented_ = fragmented;
    } else if (s.allocator_level) {
      fragmented_ = false;  // below the reserve that matters: re-armed
    }
  }
  last_value_ = value;
  have_last_ = true;
}

GPUMEMPROF_FUNC void MemoryTracker::fire(std::vector<TrackingEvent> alerts) {
  if (alerts.empty()) return;
  std::vector<std::pair<std::size_t, AlertCallback>> callbacks;
  {
    std::lock_guard lock(mutex_);
    callbacks = callbacks_;
  }
  for (const TrackingEvent& e : alerts) {
    for (const auto& [id, cb] : callbacks) {
      try {
        cb(e);
      } catch (const std::exception& ex) {
        std::lock_guard lock(mutex_);
        log(make_event(TrackingEventType::error, e.sample, std::string("alert callback threw: ") + ex.what()), nullptr);
      } catch (...) {
        std::lock_guard lock(mutex_);
        log(make_event(TrackingEventType::error, e.sample, "alert callback threw a non-standard exception"), nullptr);
      }
    }
  }
}

GPUMEMPROF_NAMESPACE_END
