// Layer 4: MemoryTracker -- samples one device in the background, keeps an event log and raises
// alerts: usage above a fraction of capacity or a byte limit, a single large jump between two
// samples, and fragmentation (free bytes the allocator holds but cannot hand out whole; by default
// the one definition of analysis/memory_facts.hpp over the allocator's segments).
//
// Alerts are edge-triggered: one fires when its condition starts to hold and re-arms once the
// condition clears, so a program sitting at 90% raises one warning, not one per sample (a
// critical alert still follows a warning when usage climbs further). Callbacks receive the
// event with the sample that triggered it; they run on the sampling thread (or the caller of
// sample_now()/process()), outside the tracker's lock, and an exception from one is logged as
// an error event. process() evaluates any sample, so tests and replays are deterministic.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"
#include "gpumemprof/profiler/ring_buffer.hpp"
#include "gpumemprof/profiler/sampler.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class TrackingEventType : std::uint8_t { start, stop, allocation, deallocation, peak, warning, critical, error };

[[nodiscard]] constexpr const char* to_string(TrackingEventType t) noexcept {
  switch (t) {
    case TrackingEventType::start: return "start";
    case TrackingEventType::stop: return "stop";
    case TrackingEventType::allocation: return "allocation";
    case TrackingEventType::deallocation: return "deallocation";
    case TrackingEventType::peak: return "peak";
    case TrackingEventType::warning: return "warning";
    case TrackingEventType::critical: return "critical";
    case TrackingEventType::error: return "error";
  }
  return "error";
}

/// Which rule raised a warning/critical event.
enum class AlertKind : std::uint8_t { none, usage, jump, fragmentation };

[[nodiscard]] constexpr const char* to_string(AlertKind k) noexcept {
  switch (k) {
    case AlertKind::none: return "none";
    case AlertKind::usage: return "usage";
    case AlertKind::jump: return "jump";
    case AlertKind::fragmentation: return "fragmentation";
  }
  return "none";
}

/// The quantity the usage thresholds compare.
enum class UsageMeasure : std::uint8_t {
  allocated,    ///< allocated bytes
  reserved,     ///< bytes the allocator holds from the device (what an OOM is about)
  device_used,  ///< the device's own account (always used at device level)
};

/// How fragmentation is measured.
enum class FragmentationMeasure : std::uint8_t {
  /// External fragmentation, the reports' one definition (analysis/memory_facts.hpp): 1 - largest
  /// free block / free bytes over the allocator's segments, read when a sample is evaluated (one
  /// walk of the segments under the allocator's lock). Undefined, so never alerting, when nothing
  /// is free or nothing is live.
  external,
  reserved_unallocated,  ///< (reserved - allocated) / reserved: the share of cached memory not in use
  inactive_split,        ///< inactive_split_bytes / reserved: the share in free slivers of split segments
};

/// Alert rules. A zero threshold disables its rule.
struct AlertThresholds {
  /// Warning / critical when usage reaches this fraction of the device's capacity.
  double warning_fraction = 0.80;
  double critical_fraction = 0.95;
  /// Warning / critical when usage reaches this many bytes (the lower of the two limits applies).
  std::int64_t warning_bytes = 0;
  std::int64_t critical_bytes = 0;
  UsageMeasure usage = UsageMeasure::reserved;
  /// Warning when allocated bytes (device used at device level) grow by at least this many
  /// bytes from one sample to the next.
  std::int64_t jump_bytes = std::int64_t{100} << 20;
  /// Warning when the fragmentation ratio reaches this value (0..1)...
  double fragmentation_ratio = 0.30;
  FragmentationMeasure fragmentation = FragmentationMeasure::external;
  /// ...while at least this many bytes are reserved (a few cached blocks are not a problem).
  std::int64_t fragmentation_min_reserved = std::int64_t{64} << 20;
};

struct TrackerOptions {
  /// The device; nullopt means the current device.
  std::optional<Device> device = std::nullopt;
  /// Background sampling period.
  std::chrono::nanoseconds interval = std::chrono::milliseconds(100);
  /// Events kept in the log (oldest dropped first).
  std::size_t max_events = 10'000;
  bool enable_alerts = true;
  /// Log allocation/deallocation/peak events when memory changes between samples.
  bool log_changes = true;
  /// Read the process's RSS into every sample.
  bool track_cpu_memory = false;
  ProfileLevel level = ProfileLevel::allocator;
  AlertThresholds thresholds = {};
};

/// One entry of the event log. Bytes in bytes, timestamp in seconds since the Unix epoch.
struct TrackingEvent {
  double timestamp = 0.0;
  TrackingEventType type = TrackingEventType::start;
  AlertKind alert = AlertKind::none;
  std::int64_t memory_allocated = 0;  ///< device used at device level
  std::int64_t memory_reserved = 0;   ///< 0 at device level
  std::int64_t memory_change = 0;     ///< since the previous sample
  int device_id = 0;
  std::string message;
  /// For alerts: the measured value (bytes or ratio) and the limit it reached.
  double value = 0.0;
  double threshold = 0.0;
  /// The sample that triggered the event.
  MemorySnapshot sample;
};

struct TrackingStatistics {
  std::int64_t capacity = 0;  ///< device memory, bytes
  /// Highest tracked value since construction or clear_events(), bytes. At allocator level the
  /// allocator's own peak of allocated bytes (a peak window), so a peak between two samples counts
  /// and the profiler's summary and a snapshot of the same run state the same figure; at device
  /// level the highest sample.
  std::int64_t peak_memory = 0;
  std::int64_t current_memory = 0;  ///< tracked value of the last sample
  std::uint64_t samples = 0;
  std::uint64_t total_allocations = 0;        ///< samples where memory grew
  std::uint64_t total_deallocations = 0;      ///< samples where memory shrank
  std::int64_t total_allocation_bytes = 0;    ///< summed growth
  std::int64_t total_deallocation_bytes = 0;  ///< summed shrinkage
  std::uint64_t alert_count = 0;              ///< warning, critical and error events
  std::uint64_t events = 0;                   ///< events held in the log
  std::uint64_t events_dropped = 0;
  double tracking_duration = 0.0;  ///< seconds of background tracking
};

class MemoryTracker {
 public:
  using AlertCallback = std::function<void(const TrackingEvent&)>;

  explicit MemoryTracker(TrackerOptions options = {});

  /// A tracker of `device`: "cuda:0", "sim:1", 0, or a Device.
  template <std::convertible_to<Device> D>
  explicit MemoryTracker(D&& device) : MemoryTracker(TrackerOptions{.device = Device(std::forward<D>(device))}) {}

  /// A tracker of `allocator`, which must outlive it.
  template <DeviceBackend B>
  explicit MemoryTracker(CachingAllocator<B>& allocator, const TrackerOptions& options = {})
      : MemoryTracker(make_memory_source(allocator, options.level), options) {}

  MemoryTracker(std::shared_ptr<MemorySource> source, const TrackerOptions& options);

  ~MemoryTracker();
  // Not copyable or movable; volatile signatures as in GPUMemoryProfiler (keeps `({})` unambiguous).
  MemoryTracker(volatile MemoryTracker&) = delete;
  MemoryTracker& operator=(volatile MemoryTracker&) = delete;

  /// Starts background sampling every options().interval; logs a start event. No-op when on.
  void start_tracking();

  /// Stops and joins the sampling thread; logs a stop event. No-op when off.
  void stop_tracking();

  [[nodiscard]] bool is_tracking() const noexcept { return sampler_.running(); }

  /// Adds a callback for warning, critical and error events; returns its id.
  std::size_t add_alert_callback(AlertCallback callback);
  void remove_alert_callback(std::size_t id);

  void set_thresholds(const AlertThresholds& thresholds);
  [[nodiscard]] AlertThresholds thresholds() const;

  /// Takes one sample now and evaluates it, as the background thread does every tick. A failed
  /// reading is logged as an error event.
  void sample_now();

  /// Evaluates `sample` (taken by sample_now() or elsewhere): statistics, change events, alerts.
  void process(const MemorySnapshot& sample);

  /// Logged events, oldest first, optionally only of `type` and only the newest `last_n` (0 = all).
  [[nodiscard]] std::vector<TrackingEvent> get_events(std::optional<TrackingEventType> type = std::nullopt,
                                                      std::size_t last_n = 0) const;

  [[nodiscard]] TrackingStatistics get_statistics() const;

  /// Empties the log, resets the statistics and re-arms every alert.
  void clear_events();

  /// The device's capacity in bytes (the base of the fractional thresholds).
  [[nodiscard]] std::int64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] const std::shared_ptr<MemorySource>& source() const noexcept { return source_; }
  [[nodiscard]] const TrackerOptions& options() const noexcept { return options_; }

 private:
  static const Device& resolve(TrackerOptions& options);

  /// The value change, peak and jump rules look at.
  static std::int64_t tracked_value(const MemorySnapshot& s);

  [[nodiscard]] std::int64_t usage_of(const MemorySnapshot& s, UsageMeasure m) const;

  /// The lower of the fractional and absolute limits; 0 when both are off.
  [[nodiscard]] double limit(double fraction, std::int64_t bytes) const;

  TrackingEvent make_event(TrackingEventType type, const MemorySnapshot& s, std::string message,
                           AlertKind alert = AlertKind::none, double value = 0.0, double threshold = 0.0) const;

  void log(TrackingEvent e, std::vector<TrackingEvent>* alerts);

  void log_marker(TrackingEventType type, const char* message);

  void evaluate(const MemorySnapshot& s, std::vector<TrackingEvent>& alerts);

  /// Runs the callbacks for `alerts` (already logged), outside the lock. A callback's exception
  /// is logged as an error event, which is not passed to callbacks again.
  void fire(std::vector<TrackingEvent> alerts);

  TrackerOptions options_;
  std::shared_ptr<MemorySource> source_;
  std::int64_t capacity_ = 0;

  mutable std::mutex mutex_;  // guards everything below
  detail::RingBuffer<TrackingEvent> events_;
  TrackingStatistics stats_;
  std::vector<std::pair<std::size_t, AlertCallback>> callbacks_;
  std::size_t next_callback_id_ = 1;
  std::int64_t last_value_ = 0;
  bool have_last_ = false;
  int usage_level_ = 0;  // 0 none, 1 warning, 2 critical
  bool fragmented_ = false;
  std::uint64_t peak_window_ = 0;  // allocator level: the allocator's peak since construction/clear_events()
  std::chrono::steady_clock::time_point tracking_since_{};
  double tracked_seconds_ = 0.0;

  std::mutex control_;       // serializes start_tracking() and stop_tracking()
  PeriodicSampler sampler_;  // last: stops before the members above go away
};

#ifdef GPUMEMPROF_COMPILED_LIB
// Compiled once for the default allocator's type, in the gpumemprof library (lib/profiler.cpp).
extern template MemoryTracker::MemoryTracker(CachingAllocator<AnyBackend>&, const TrackerOptions&);
#endif

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/tracker-inl.hpp"
#endif
