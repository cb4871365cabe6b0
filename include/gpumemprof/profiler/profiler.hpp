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
[[nodiscard]] std::shared_ptr<std::atomic<std::uint32_t>> open_scope_counter(const void* profiler);

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
  std::uint32_t annotation_ = 0;  // the name's id when the scope opened an annotated range
};

class GPUMemoryProfiler {
 public:
  /// A profiler of `options.device` (default: the current device) through its default
  /// allocator. Throws DeviceError naming the available devices when the device does not exist.
  explicit GPUMemoryProfiler(ProfilerOptions options = {});

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
  ~GPUMemoryProfiler();

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

  /// Opens a profiled scope; its result is recorded when the returned guard ends. While memory
  /// history is recorded, the scope is also an annotated range named `name` in the snapshot
  /// (like gmp::annotate and PyTorch's record_function): scopes named "train_step" or "step N"
  /// are the steps that summary, html and slice --steps count (docs/steps.md).
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
  [[nodiscard]] std::vector<MemorySnapshot> snapshots() const;
  /// Recorded results, oldest first (at most options().max_results).
  [[nodiscard]] std::vector<ProfileResult> results() const;
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
  [[nodiscard]] MemorySnapshot baseline() const;

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

GPUMEMPROF_NAMESPACE_END

// The member bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/profiler-inl.hpp"
#endif
