// Layer 4: a background thread that runs one task at a fixed interval -- the profiler's monitor
// and the tracker's sampling loop.
//
// Ticks follow a fixed schedule (start + k * interval), so the rate does not drift with the
// task's own cost; ticks missed while the task ran long are skipped, not bunched. stop() wakes
// the thread at once (a condition variable, not a sleep) and joins it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class PeriodicSampler {
 public:
  PeriodicSampler() = default;
  ~PeriodicSampler();
  PeriodicSampler(const PeriodicSampler&) = delete;
  PeriodicSampler& operator=(const PeriodicSampler&) = delete;

  /// Runs `task` now and then every `interval` on a new thread, until stop(). An exception from
  /// the task is kept (last_error()) and sampling goes on. Throws std::invalid_argument for a
  /// non-positive interval and std::logic_error when already running.
  void start(std::chrono::nanoseconds interval, std::function<void()> task);

  /// start(), except that when the sampler is running already it returns false and changes
  /// nothing: the check and the start are one step, so threads racing to start it are safe.
  bool start_unless_running(std::chrono::nanoseconds interval, std::function<void()> task);

  /// Stops the thread and waits for it; no-op (false) when not running. Any thread may call it,
  /// but not the task itself.
  bool stop();

  [[nodiscard]] bool running() const noexcept { return running_.load(std::memory_order_acquire); }
  /// Task runs so far (over every start()).
  [[nodiscard]] std::uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_acquire); }
  /// The message of the last exception the task threw; empty when none.
  [[nodiscard]] std::string last_error() const;

 private:
  void loop(std::chrono::nanoseconds interval, const std::function<void()>& task);
  void run_once(const std::function<void()>& task);

  std::mutex control_;  // serializes start()/stop()
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_requested_ = false;
  std::string last_error_;
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> ticks_{0};
  std::thread thread_;
};

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/sampler-inl.hpp"
#endif
