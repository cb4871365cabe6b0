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
  ~PeriodicSampler() { stop(); }
  PeriodicSampler(const PeriodicSampler&) = delete;
  PeriodicSampler& operator=(const PeriodicSampler&) = delete;

  /// Runs `task` now and then every `interval` on a new thread, until stop(). An exception from
  /// the task is kept (last_error()) and sampling goes on. Throws std::invalid_argument for a
  /// non-positive interval and std::logic_error when already running.
  void start(std::chrono::nanoseconds interval, std::function<void()> task) {
    if (!start_unless_running(interval, std::move(task))) {
      throw std::logic_error("the sampler is already running; stop it first");
    }
  }

  /// start(), except that when the sampler is running already it returns false and changes
  /// nothing: the check and the start are one step, so threads racing to start it are safe.
  bool start_unless_running(std::chrono::nanoseconds interval, std::function<void()> task) {
    if (interval <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("sampling interval must be positive, got " + std::to_string(interval.count()) +
                                  " ns");
    }
    std::lock_guard control(control_);
    if (thread_.joinable()) return false;
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = false;
    }
    running_.store(true, std::memory_order_release);
    thread_ = std::thread([this, interval, task = std::move(task)] { loop(interval, task); });
    return true;
  }

  /// Stops the thread and waits for it; no-op (false) when not running. Any thread may call it,
  /// but not the task itself.
  bool stop() {
    std::lock_guard control(control_);
    if (!thread_.joinable()) return false;
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
    }
    wake_.notify_all();
    thread_.join();
    running_.store(false, std::memory_order_release);
    return true;
  }

  [[nodiscard]] bool running() const noexcept { return running_.load(std::memory_order_acquire); }
  /// Task runs so far (over every start()).
  [[nodiscard]] std::uint64_t ticks() const noexcept { return ticks_.load(std::memory_order_acquire); }
  /// The message of the last exception the task threw; empty when none.
  [[nodiscard]] std::string last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
  }

 private:
  void loop(std::chrono::nanoseconds interval, const std::function<void()>& task) {
    using clock = std::chrono::steady_clock;
    auto next = clock::now();
    std::unique_lock lock(mutex_);
    while (!stop_requested_) {
      lock.unlock();
      run_once(task);
      lock.lock();
      next += interval;
      if (const auto now = clock::now(); next < now) {
        next = now + interval - (now - next) % interval;  // skip missed ticks, keep the phase
      }
      wake_.wait_until(lock, next, [this] { return stop_requested_; });
    }
  }

  void run_once(const std::function<void()>& task) {
    try {
      task();
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      last_error_ = e.what();
    } catch (...) {
      std::lock_guard lock(mutex_);
      last_error_ = "non-standard exception";
    }
    ticks_.fetch_add(1, std::memory_order_acq_rel);
  }

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
