// Layer 0 (ground floor): a small lock for critical sections of a few dozen instructions --
// a bucket of a sharded table, one cache line of counters. Unlocking is a plain release store
// (std::mutex pays an atomic exchange), and a contended waiter spins on a load, so the line is
// not bounced while the owner works. After a short spin it yields: the owner may be descheduled
// (more threads than cores), or a slow path may hold the lock across a device call.
#pragma once

#include <atomic>
#include <thread>

#include "gpumemprof/config.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  /// The CPU's spin-wait hint (for other spin loops).
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
