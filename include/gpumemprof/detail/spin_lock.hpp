// Layer 0 (ground floor): a small lock for critical sections of a few dozen instructions --
// a bucket of a sharded table, one cache line of counters. Unlocking is a plain release store
// (std::mutex pays an atomic exchange), and a contended waiter spins on a load, so the line is
// not bounced while the owner works. After a short spin it yields: the owner may be descheduled
// (more threads than cores), or a slow path may hold the lock across a device call.
#pragma once

#include <atomic>

#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"

// sched_yield and the compiler's pause builtin, not <thread> and <immintrin.h>: this header is in
// every user's build, and those two add ~60k lines.
#if defined(__unix__)
#include <sched.h>
#else
#include <thread>
#endif

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Waits while `busy()` is true: a short spin on the CPU's spin-wait hint, then yielding (the
/// thread that ends the wait may be descheduled). Every spin-wait of the project uses this policy.
template <class Busy>
void spin_while(Busy&& busy) noexcept {
  for (int spins = 0; busy(); ++spins) {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    } else {
#if defined(__unix__)
      sched_yield();
#else
      std::this_thread::yield();
#endif
    }
  }
}

class GPUMEMPROF_CAPABILITY("spin lock") SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  /// One atomic exchange when free (small enough to inline on the hot path); the wait is out of line.
  void lock() noexcept GPUMEMPROF_ACQUIRE() {
    if (GPUMEMPROF_LIKELY(!locked_.exchange(true, std::memory_order_acquire))) return;
    lock_contended();
  }
  [[nodiscard]] bool try_lock() noexcept GPUMEMPROF_TRY_ACQUIRE(true) {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept GPUMEMPROF_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  GPUMEMPROF_NOINLINE void lock_contended() noexcept GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    do {
      spin_while([this] { return locked_.load(std::memory_order_relaxed); });
    } while (locked_.exchange(true, std::memory_order_acquire));
  }

  std::atomic<bool> locked_{false};
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
