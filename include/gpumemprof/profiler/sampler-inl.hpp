// Layer 4: PeriodicSampler's thread. Included by sampler.hpp in header-only mode; compiled once
// in the library (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to
// include on its own.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/sampler.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC PeriodicSampler::~PeriodicSampler() { stop(); }

GPUMEMPROF_FUNC void PeriodicSampler::start(std::chrono::nanoseconds interval, std::function<void()> task) {
  if (!start_unless_running(interval, std::move(task))) {
    throw std::logic_error("the sampler is already running; stop it first");
  }
}

GPUMEMPROF_FUNC bool PeriodicSampler::start_unless_running(std::chrono::nanoseconds interval,
                                                           std::function<void()> task) {
  if (interval <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("sampling interval must be positive, got " + std::to_string(interval.count()) + " ns");
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

GPUMEMPROF_FUNC bool PeriodicSampler::stop() {
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

GPUMEMPROF_FUNC std::string PeriodicSampler::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

GPUMEMPROF_FUNC void PeriodicSampler::loop(std::chrono::nanoseconds interval, const std::function<void()>& task) {
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

GPUMEMPROF_FUNC void PeriodicSampler::run_once(const std::function<void()>& task) {
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

GPUMEMPROF_NAMESPACE_END
