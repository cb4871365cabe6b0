// Layer 0 (ground floor): Clang thread-safety annotations, so that the compiler checks which lock
// guards what (-Wthread-safety; clang only, the macros expand to nothing elsewhere), and the
// annotated lock types the allocator uses: Mutex (std::mutex) and LockGuard.
//
// A lock type is a CAPABILITY; a member written or read only under lock `m` is GUARDED_BY(m); a
// function that needs `m` held is REQUIRES(m), one that takes or lets it go ACQUIRE(m) /
// RELEASE(m). Where a protocol cannot be said this way (a set of locks chosen at run time), the
// function says NO_THREAD_SAFETY_ANALYSIS, keeps to a few lines, and its comment says why it is
// safe.
#pragma once

#include <mutex>

#include "gpumemprof/config.hpp"

#if defined(__clang__)
#define GPUMEMPROF_TSA_(x) __attribute__((x))
#else
#define GPUMEMPROF_TSA_(x)
#endif

#define GPUMEMPROF_CAPABILITY(name) GPUMEMPROF_TSA_(capability(name))
#define GPUMEMPROF_SCOPED_CAPABILITY GPUMEMPROF_TSA_(scoped_lockable)
#define GPUMEMPROF_GUARDED_BY(x) GPUMEMPROF_TSA_(guarded_by(x))
#define GPUMEMPROF_PT_GUARDED_BY(x) GPUMEMPROF_TSA_(pt_guarded_by(x))
#define GPUMEMPROF_ACQUIRED_BEFORE(...) GPUMEMPROF_TSA_(acquired_before(__VA_ARGS__))
#define GPUMEMPROF_ACQUIRED_AFTER(...) GPUMEMPROF_TSA_(acquired_after(__VA_ARGS__))
#define GPUMEMPROF_REQUIRES(...) GPUMEMPROF_TSA_(requires_capability(__VA_ARGS__))
#define GPUMEMPROF_ACQUIRE(...) GPUMEMPROF_TSA_(acquire_capability(__VA_ARGS__))
#define GPUMEMPROF_RELEASE(...) GPUMEMPROF_TSA_(release_capability(__VA_ARGS__))
#define GPUMEMPROF_TRY_ACQUIRE(...) GPUMEMPROF_TSA_(try_acquire_capability(__VA_ARGS__))
#define GPUMEMPROF_EXCLUDES(...) GPUMEMPROF_TSA_(locks_excluded(__VA_ARGS__))
#define GPUMEMPROF_ASSERT_CAPABILITY(x) GPUMEMPROF_TSA_(assert_capability(x))
#define GPUMEMPROF_RETURN_CAPABILITY(x) GPUMEMPROF_TSA_(lock_returned(x))
#define GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS GPUMEMPROF_TSA_(no_thread_safety_analysis)

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// std::mutex, annotated (libstdc++'s is not, so the analysis would not see it taken).
class GPUMEMPROF_CAPABILITY("mutex") Mutex {
 public:
  void lock() GPUMEMPROF_ACQUIRE() { m_.lock(); }
  [[nodiscard]] bool try_lock() GPUMEMPROF_TRY_ACQUIRE(true) { return m_.try_lock(); }
  void unlock() GPUMEMPROF_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

/// Tag: a LockGuard takes over a lock this thread holds already (std::adopt_lock).
struct AdoptLock {
  explicit AdoptLock() = default;
};
inline constexpr AdoptLock adopt_lock{};

/// std::lock_guard for annotated locks (the analysis does not see through std::lock_guard).
template <class Lock>
class GPUMEMPROF_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Lock& lock) GPUMEMPROF_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
  /// Takes over `lock`, held already (a try_lock that succeeded): lets it go when destroyed.
  LockGuard(Lock& lock, AdoptLock) GPUMEMPROF_REQUIRES(lock) : lock_(lock) {}
  ~LockGuard() GPUMEMPROF_RELEASE() { lock_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Lock& lock_;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
