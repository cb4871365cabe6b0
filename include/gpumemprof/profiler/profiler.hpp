// Layer 4: GPUMemoryProfiler -- profiled calls, RAII profiled scopes, a background monitor and
// a summary, over one device's allocator (or, at device level, over the device alone).
//
//   gmp::GPUMemoryProfiler profiler("sim:0");
//   gmp::ProfileResult r = profiler.profile_function("train_step", train_step, model, batch);
//   { auto scope = profiler.profile_context("data_loading"); load(); }  // recorded at scope exit
//   profiler.start_monitoring(std::chrono::milliseconds(100));
//   std::cout << profiler.get_summary();
//
// A scope costs two lock-free gauge reads, two clock reads and one allocator peak window
// (one short allocator lock at each end); see bench/bench_profiler.cpp. Every member function
// is thread-safe; scopes on different threads and nested scopes each get their own peak. A
// scope must end before its profiler is destroyed.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/profile_summary.hpp"
#include "gpumemprof/profiler/ring_buffer.hpp"
#include "gpumemprof/profiler/sampler.hpp"
#include "gpumemprof/profiler/scope_hooks.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// How a GPUMemoryProfiler reads and records. Aggregate: write
/// `{.device = "sim:0", .track_cpu_memory = true}`.
struct ProfilerOptions {
  /// The device; nullopt (the default) means the current device (Device()), resolved when the
  /// profiler is constructed.
  std::optional<Device> device = std::nullopt;
  /// Report allocation and free counts (tensors_created / tensors_deleted).
  bool track_tensors = true;
  /// Read the process's resident set size into every snapshot (cpu_memory). Off by default:
  /// each reading costs ~0.4 us, twice the cost of a whole scope without it.
  bool track_cpu_memory = false;
  /// Capture the C++ call stack at scope entry into the snapshots' stack_trace (needs a build
  /// with GPUMEMPROF_WITH_STACKTRACE; costs microseconds per scope).
  bool collect_stack_traces = false;
  /// Wait for the device's queued work before reading the clock at scope entry and exit, so
  /// execution_time covers asynchronous kernels. Only CUDA devices have anything to wait for.
  bool synchronize = true;
  /// Allocator level (the program allocates through gpumemprof) or device level (it does not:
  /// only the device's used memory is read).
  ProfileLevel level = ProfileLevel::allocator;
  /// Results kept for results(); older ones are dropped (the summary still counts them).
  std::size_t max_results = 100'000;
  /// Monitoring samples kept for snapshots(); older ones are dropped.
  std::size_t max_snapshots = 10'000;
};

class GPUMemoryProfiler;

namespace detail {

/// Profiled scopes of `profiler` open on this thread. Shared, so that a scope moved to another
/// thread still decrements the counter of the thread it began on.
[[nodiscard]] inline std::shared_ptr<std::atomic<std::uint32_t>> open_scope_counter(const void* profiler) {
  using Counter = std::shared_ptr<std::atomic<std::uint32_t>>;
  thread_local std::vector<std::pair<const void*, Counter>> counters;
  for (auto& [owner, counter] : counters) {
    if (owner == profiler) return counter;
  }
  // Forget profilers with no open scope left (a later one may reuse the address: it starts at 0).
  std::erase_if(counters, [](const auto& c) { return c.second.use_count() == 1 && c.second->load() == 0; });
  return counters.emplace_back(profiler, std::make_shared<std::atomic<std::uint32_t>>(0)).second;
}

}  // namespace detail

/// An open profiled scope (from GPUMemoryProfiler::profile_context). Its result is recorded
/// when it is destroyed or stop()ped. Left by an exception, the result carries the message
/// given to set_exception_message(), or a note that the scope was unwound.
class ProfileScope {
 public:
  ProfileScope(ProfileScope&& other) noexcept;
  ProfileScope& operator=(ProfileScope&&) = delete;
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;
  /// Records the result (errors while recording are swallowed: destructors must not throw).
  ~ProfileScope();

  /// Ends the scope now, records its result and returns it. Throws std::logic_error when the
  /// scope has already ended, and device errors from the final synchronize (after recording).
  ProfileResult stop();
  /// Marks the body as failed with `message` (call it in a catch handler before rethrowing).
  void set_exception_message(std::string message) { exception_message_ = std::move(message); }
  /// False once stopped or moved from.
  [[nodiscard]] bool active() const noexcept { return profiler_ != nullptr; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  friend class GPUMemoryProfiler;
  ProfileScope(GPUMemoryProfiler& profiler, std::string_view name);

  GPUMemoryProfiler* profiler_;
  std::string name_;
  int uncaught_at_entry_;
  std::chrono::steady_clock::time_point start_{};
  AllocatorGauges gauges_before_{};
  MemorySnapshot before_;
  std::uint64_t window_ = 0;                                 // allocator (or device-level) peak window
  std::shared_ptr<std::atomic<std::uint32_t>> open_scopes_;  // of this profiler on the entry thread
  std::uint32_t depth_ = 0;
  std::vector<std::uintptr_t> stack_;
  std::optional<std::string> exception_message_;
  detail::EnteredHooks hooks_;
};

class GPUMemoryProfiler {
 public:
  /// A profiler of `options.device` (default: the current device) through its default
  /// allocator. Throws DeviceError naming the available devices when the device does not exist.
  explicit GPUMemoryProfiler(ProfilerOptions options = {})
      : GPUMemoryProfiler(make_memory_source(resolve(options), options.level), options) {}

  /// A profiler of `device`: "cuda:0", "sim:1", 0, or a Device.
  template <std::convertible_to<Device> D>
  explicit GPUMemoryProfiler(D&& device)
      : GPUMemoryProfiler(ProfilerOptions{.device = Device(std::forward<D>(device))}) {}

  /// A profiler of `allocator` (which must outlive it); options.device, when set, must name
  /// the allocator's device.
  template <DeviceBackend B>
  explicit GPUMemoryProfiler(CachingAllocator<B>& allocator, ProfilerOptions options = {})
      : GPUMemoryProfiler(make_memory_source(allocator, options.level), checked_device(allocator, options)) {}

  /// A profiler over any MemorySource (its level overrides options.level).
  GPUMemoryProfiler(std::shared_ptr<MemorySource> source, const ProfilerOptions& options);

  /// Stops monitoring. Every scope must have ended.
  ~GPUMemoryProfiler() {
    sampler_.stop();
    close_window(baseline_window_);
  }

  // Not copyable or movable (scopes and the monitor point at it). The volatile signatures keep
  // the implicit copy constructor from being declared, so `GPUMemoryProfiler p({})` is not
  // ambiguous between ProfilerOptions and a copy of a default-constructed profiler.
  GPUMemoryProfiler(volatile GPUMemoryProfiler&) = delete;
  GPUMemoryProfiler& operator=(volatile GPUMemoryProfiler&) = delete;

  /// Calls f(args...) as a profiled scope named `name`, records and returns its result. When f
  /// throws, the result is recorded with the exception's message and the exception propagates
  /// unchanged. f's return value is discarded.
  template <class F, class... Args>
  ProfileResult profile_function(std::string_view name, F&& f, Args&&... args) requires std::invocable<F, Args...> {
    ProfileScope scope = profile_context(name);
    try {
      std::invoke(std::forward<F>(f), std::forward<Args>(args)...);
    } catch (const std::exception& e) {
      scope.set_exception_message(e.what());
      throw;
    } catch (...) {
      scope.set_exception_message("non-standard exception");
      throw;
    }
    return scope.stop();
  }

  /// Opens a profiled scope; its result is recorded when the returned guard ends.
  [[nodiscard]] ProfileScope profile_context(std::string_view name = "context") { return ProfileScope(*this, name); }

  /// Starts sampling every `interval` on a background thread into snapshots() (allocator
  /// gauges, lock-free; the device's used memory; RSS when tracked). No-op when already on.
  void start_monitoring(std::chrono::nanoseconds interval = std::chrono::milliseconds(100));
  /// Stops and joins the monitor; no-op when off.
  void stop_monitoring() { sampler_.stop(); }
  [[nodiscard]] bool is_monitoring() const noexcept { return sampler_.running(); }
  /// Takes one monitoring sample now, as the monitor thread does every tick.
  void sample_now();

  /// Monitoring samples, oldest first (at most options().max_snapshots).
  [[nodiscard]] std::vector<MemorySnapshot> snapshots() const {
    std::lock_guard lock(samples_mutex_);
    return samples_.to_vector();
  }
  /// Recorded results, oldest first (at most options().max_results).
  [[nodiscard]] std::vector<ProfileResult> results() const {
    std::lock_guard lock(results_mutex_);
    return results_.to_vector();
  }
  /// Totals over every result recorded since construction or clear_results().
  [[nodiscard]] ProfileSummary get_summary() const;
  /// get_summary() as a text table.
  [[nodiscard]] std::string format_summary() const { return gpumemprof::format_summary(get_summary()); }
  /// Drops results and samples and takes a new baseline. The allocator's own statistics
  /// (peaks included) are left alone.
  void clear_results();

  /// A reading of the device now (device memory included), recorded nowhere.
  [[nodiscard]] MemorySnapshot take_snapshot(std::string_view operation = "snapshot") const {
    return read_memory(*source_, operation, {.cpu_memory = options_.track_cpu_memory, .device_memory = true});
  }
  /// The reading taken at construction or at the last clear_results().
  [[nodiscard]] MemorySnapshot baseline() const {
    std::lock_guard lock(results_mutex_);
    return baseline_;
  }

  [[nodiscard]] const ProfilerOptions& options() const noexcept { return options_; }
  [[nodiscard]] const std::string& device_name() const noexcept { return source_->device_name(); }
  [[nodiscard]] int device_id() const noexcept { return source_->device_id(); }
  [[nodiscard]] bool allocator_level() const noexcept { return source_->allocator_level(); }
  [[nodiscard]] const std::shared_ptr<MemorySource>& source() const noexcept { return source_; }
  /// The monitor's last error (e.g. a failing device query); empty when none.
  [[nodiscard]] std::string monitoring_error() const { return sampler_.last_error(); }

 private:
  friend class ProfileScope;
  using clock = std::chrono::steady_clock;

  // Fills in the current device, so options().device says which device "{}" meant.
  static const Device& resolve(ProfilerOptions& options) {
    if (!options.device) options.device = Device();
    return *options.device;
  }
  template <DeviceBackend B>
  static ProfilerOptions checked_device(CachingAllocator<B>& allocator, ProfilerOptions options) {
    if (options.device && options.device->str() != allocator.device_name()) {
      throw DeviceError("GPUMemoryProfiler: options.device is " + options.device->str() + " but the allocator serves " +
                        allocator.device_name());
    }
    return options;
  }

  [[nodiscard]] ReadingOptions scope_reading() const noexcept { return {.cpu_memory = options_.track_cpu_memory}; }
  void enter(ProfileScope& scope);
  ProfileResult finish(ProfileScope& scope, bool unwinding, std::exception_ptr& sync_error);
  void record(ProfileResult result);
  [[nodiscard]] std::int64_t current_usage() const;
  // Device level: peaks over the readings (scope ends and monitor samples) inside a window.
  std::uint64_t open_device_window(std::int64_t used);
  std::int64_t close_device_window(std::uint64_t id);
  std::int64_t peak_of_device_window(std::uint64_t id) const;
  // The window since the baseline, whose peak is the summary's one peak.
  std::uint64_t open_baseline_window(const MemorySnapshot& baseline);
  void close_window(std::uint64_t id) noexcept;

  ProfilerOptions options_;
  std::shared_ptr<MemorySource> source_;

  mutable std::mutex results_mutex_;  // guards results_, summary_, baseline_, baseline_window_
  detail::RingBuffer<ProfileResult> results_;
  detail::SummaryAccumulator summary_;
  MemorySnapshot baseline_;
  std::uint64_t baseline_window_ = 0;

  mutable std::mutex samples_mutex_;
  detail::RingBuffer<MemorySnapshot> samples_;

  mutable std::mutex device_mutex_;
  detail::PeakWindows device_windows_;

  PeriodicSampler sampler_;  // last: its thread stops before the members above go away
};

// ------------------------------------------------------------------------------------------------

inline GPUMemoryProfiler::GPUMemoryProfiler(std::shared_ptr<MemorySource> source, const ProfilerOptions& options)
    : options_(options), source_(std::move(source)), results_(options_.max_results), samples_(options_.max_snapshots) {
  if (source_ == nullptr) throw std::invalid_argument("GPUMemoryProfiler: null memory source");
  options_.level = source_->level();
  baseline_ = take_snapshot("baseline");
  baseline_window_ = open_baseline_window(baseline_);
}

inline std::uint64_t GPUMemoryProfiler::open_baseline_window(const MemorySnapshot& baseline) {
  return source_->allocator_level() ? source_->open_peak_window()
                                    : open_device_window(baseline.device_used_memory.value_or(0));
}

inline void GPUMemoryProfiler::close_window(std::uint64_t id) noexcept {
  try {
    (void)(source_->allocator_level() ? source_->close_peak_window(id) : close_device_window(id));
  } catch (...) {  // NOLINT(bugprone-empty-catch): an unknown id has nothing to close
  }
}

inline void GPUMemoryProfiler::start_monitoring(std::chrono::nanoseconds interval) {
  (void)sampler_.start_unless_running(interval, [this] { sample_now(); });
}

inline void GPUMemoryProfiler::sample_now() {
  MemorySnapshot s = take_snapshot("monitoring");
  if (!source_->allocator_level()) {
    std::lock_guard lock(device_mutex_);
    device_windows_.on_value(s.device_used_memory.value_or(0));
  }
  std::lock_guard lock(samples_mutex_);
  samples_.push(std::move(s));
}

inline std::uint64_t GPUMemoryProfiler::open_device_window(std::int64_t used) {
  std::lock_guard lock(device_mutex_);
  return device_windows_.open(used);
}

inline std::int64_t GPUMemoryProfiler::close_device_window(std::uint64_t id) {
  std::lock_guard lock(device_mutex_);
  return device_windows_.close(id);
}

inline std::int64_t GPUMemoryProfiler::peak_of_device_window(std::uint64_t id) const {
  std::lock_guard lock(device_mutex_);
  return device_windows_.peak(id);
}

inline std::int64_t GPUMemoryProfiler::current_usage() const {
  if (source_->allocator_level()) return source_->gauges().allocated_bytes;
  const MemInfo info = source_->mem_get_info();
  return static_cast<std::int64_t>(info.total - info.free);
}

// Entry: everything that can throw comes before the peak window opens; the clock is read last,
// so the entry reading is not timed. Exit: the clock is read first, the window closed next.
inline void GPUMemoryProfiler::enter(ProfileScope& s) {
  if (options_.collect_stack_traces && stacks_available) {
    constexpr std::size_t max_frames = 32;
    s.stack_.resize(max_frames);
    s.stack_.resize(capture_stack(s.stack_.data(), max_frames));
  }
  if (options_.synchronize) source_->synchronize();
  s.gauges_before_ = source_->gauges();
  detail::fill_reading(s.before_, *source_, s.gauges_before_, s.name_, clock::time_point{}, scope_reading());
  s.window_ = source_->allocator_level() ? source_->open_peak_window()
                                         : open_device_window(s.before_.device_used_memory.value_or(0));
  auto open_scopes = detail::open_scope_counter(this);
  s.hooks_.enter(s.name_.c_str());
  s.depth_ = open_scopes->fetch_add(1);  // nothing below throws
  s.open_scopes_ = std::move(open_scopes);
  s.start_ = clock::now();
  s.before_.timestamp = detail::wall_seconds(s.start_);
}

inline ProfileResult GPUMemoryProfiler::finish(ProfileScope& s, bool unwinding, std::exception_ptr& sync_error) {
  std::optional<std::string> sync_message;
  if (options_.synchronize) {
    try {
      source_->synchronize();
    } catch (const std::exception& e) {
      sync_error = std::current_exception();
      sync_message = std::string("device synchronize failed: ") + e.what();
    }
  }
  const auto end = clock::now();
  if (s.open_scopes_) s.open_scopes_->fetch_sub(1);
  const bool allocator_level = source_->allocator_level();
  const AllocatorGauges after = source_->gauges();
  ProfileResult r;
  r.name = std::move(s.name_);
  r.device = source_->device_name();
  // Hooks always see an exit, even when building the result throws.
  struct HookExit {
    detail::EnteredHooks& hooks;
    const ProfileResult& result;
    ~HookExit() { hooks.exit(result); }
  } hook_exit{s.hooks_, r};
  const std::int64_t window_peak =
      allocator_level ? source_->close_peak_window(s.window_) : close_device_window(s.window_);

  r.allocator_level = allocator_level;
  r.depth = s.depth_;
  r.execution_time = std::chrono::duration<double>(end - s.start_).count();
  r.memory_before = std::move(s.before_);
  detail::fill_reading(r.memory_after, *source_, after, r.name, end, scope_reading());
  if (allocator_level) {
    const AllocatorGauges& before = s.gauges_before_;
    r.memory_allocated = static_cast<std::int64_t>(after.total_allocated_bytes - before.total_allocated_bytes);
    r.memory_freed = static_cast<std::int64_t>(after.total_freed_bytes - before.total_freed_bytes);
    if (options_.track_tensors) {
      r.tensors_created = static_cast<std::int64_t>(after.total_allocations - before.total_allocations);
      r.tensors_deleted = static_cast<std::int64_t>(after.total_frees - before.total_frees);
    }
  }
  MemorySnapshot& peak = r.memory_peak;
  const MemorySnapshot& b = r.memory_before;
  const MemorySnapshot& a = r.memory_after;
  peak = a;
  peak.reserved_memory = std::max(b.reserved_memory, a.reserved_memory);
  peak.active_memory = std::max(b.active_memory, a.active_memory);
  peak.inactive_memory = std::max(b.inactive_memory, a.inactive_memory);
  peak.cpu_memory = std::max(b.cpu_memory, a.cpu_memory);
  if (allocator_level) {
    peak.allocated_memory = std::max({window_peak, b.allocated_memory, a.allocated_memory});
  } else {
    peak.device_used_memory =
        std::max({window_peak, b.device_used_memory.value_or(0), a.device_used_memory.value_or(0)});
  }
  if (!s.stack_.empty()) {
    auto frames = std::make_shared<std::vector<Frame>>();
    bool user_code = false;
    for (const std::uintptr_t address : s.stack_) {
      const Frame& f = Symbolizer::instance().frame(address);
      user_code = user_code || !Symbolizer::is_internal(f);  // drop the profiler's own frames
      if (user_code) frames->push_back(f);
    }
    r.memory_before.stack_trace = std::move(frames);
    r.memory_after.stack_trace = r.memory_before.stack_trace;
    peak.stack_trace = r.memory_before.stack_trace;
  }
  if (s.exception_message_) {
    r.exception_message = std::move(s.exception_message_);
  } else if (unwinding) {
    r.exception_message = "unknown exception (the scope was left by unwinding)";
  } else if (sync_message) {
    r.exception_message = std::move(sync_message);  // an asynchronous failure of the body's work
  }
  s.hooks_.exit(r);  // before `r` may be moved out; the guard's exit is then a no-op
  return r;
}

inline void GPUMemoryProfiler::record(ProfileResult result) {
  std::lock_guard lock(results_mutex_);
  summary_.add(result);
  results_.push(std::move(result));
}

inline ProfileSummary GPUMemoryProfiler::get_summary() const {
  ProfileSummary s;
  s.device = source_->device_name();
  s.allocator_level = source_->allocator_level();
  s.current_memory_usage = current_usage();
  {
    std::lock_guard lock(results_mutex_);
    summary_.fill(s);
    const std::int64_t since_baseline =
        s.allocator_level ? source_->peak_window(baseline_window_) : peak_of_device_window(baseline_window_);
    s.peak_memory_usage = std::max(s.peak_memory_usage, since_baseline);
    s.baseline_memory_usage = s.allocator_level ? baseline_.allocated_memory : baseline_.device_used_memory.value_or(0);
    s.results_dropped = results_.dropped();
  }
  s.memory_change_from_baseline = s.current_memory_usage - s.baseline_memory_usage;
  s.monitoring_active = sampler_.running();
  {
    std::lock_guard lock(samples_mutex_);
    s.snapshots_collected = samples_.size();
  }
  return s;
}

inline void GPUMemoryProfiler::clear_results() {
  MemorySnapshot fresh = take_snapshot("baseline");
  {
    std::lock_guard lock(results_mutex_);
    results_.clear();
    summary_.clear();
    close_window(baseline_window_);
    baseline_window_ = open_baseline_window(fresh);
    baseline_ = std::move(fresh);
  }
  std::lock_guard lock(samples_mutex_);
  samples_.clear();
}

// ------------------------------------------------------------------------------------------------

inline ProfileScope::ProfileScope(GPUMemoryProfiler& profiler, std::string_view name)
    : profiler_(&profiler), name_(name), uncaught_at_entry_(std::uncaught_exceptions()) {
  profiler.enter(*this);
}

inline ProfileScope::ProfileScope(ProfileScope&& other) noexcept
    : profiler_(std::exchange(other.profiler_, nullptr)),
      name_(std::move(other.name_)),
      uncaught_at_entry_(other.uncaught_at_entry_),
      start_(other.start_),
      gauges_before_(other.gauges_before_),
      before_(std::move(other.before_)),
      window_(other.window_),
      open_scopes_(std::move(other.open_scopes_)),
      depth_(other.depth_),
      stack_(std::move(other.stack_)),
      exception_message_(std::move(other.exception_message_)),
      hooks_(std::exchange(other.hooks_, detail::EnteredHooks{})) {}

inline ProfileScope::~ProfileScope() {
  if (profiler_ == nullptr) return;
  GPUMemoryProfiler& p = *std::exchange(profiler_, nullptr);
  try {
    std::exception_ptr sync_error;  // nowhere to report it from a destructor
    p.record(p.finish(*this, std::uncaught_exceptions() > uncaught_at_entry_, sync_error));
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

inline ProfileResult ProfileScope::stop() {
  if (profiler_ == nullptr) throw std::logic_error("ProfileScope::stop: the scope has already ended");
  GPUMemoryProfiler& p = *std::exchange(profiler_, nullptr);
  std::exception_ptr sync_error;
  ProfileResult r = p.finish(*this, std::uncaught_exceptions() > uncaught_at_entry_, sync_error);
  p.record(r);
  if (sync_error) std::rethrow_exception(sync_error);
  return r;
}

GPUMEMPROF_NAMESPACE_END
