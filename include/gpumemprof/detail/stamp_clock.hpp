// Layer 0 (ground floor): a monotonic time stamp that orders events across threads and cores,
// for merging per-thread logs into one serial order. If event A happens before event B (a lock
// handed from A's thread to B's, say), A's stamp is <= B's.
//
// On x86-64 with an invariant TSC that the kernel itself trusts as its clock source (so the
// counters of all cores agree), a stamp is the TSC read between load fences: about 10 ns, a third
// of steady_clock's vDSO call. The fences keep the read after everything before it (a lock just
// taken) and, in stamp_fenced(), before everything after it. Elsewhere: steady_clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gpumemprof/config.hpp"

#if defined(__x86_64__)
#include <cpuid.h>  // not <x86intrin.h>: 50k lines of intrinsics in every user's build
#endif

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Whether stamps come from the TSC (decided once per process).
inline bool stamps_from_tsc() noexcept {
  static const bool tsc = [] {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0 || (d & (1u << 8)) == 0) return false;  // invariant TSC
    std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f == nullptr) return false;
    char source[16] = {};
    const bool read = std::fgets(source, sizeof source, f) != nullptr;
    std::fclose(f);
    return read && (std::strcmp(source, "tsc\n") == 0 || std::strcmp(source, "tsc") == 0);
#else
    return false;
#endif
  }();
  return tsc;
}

/// A stamp ordered after every earlier instruction of this thread.
inline std::uint64_t stamp_now() noexcept {
#if defined(__x86_64__)
  if (GPUMEMPROF_LIKELY(stamps_from_tsc())) {
    __builtin_ia32_lfence();
    return __builtin_ia32_rdtsc();
  }
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

/// A stamp ordered after every earlier and before every later instruction of this thread.
inline std::uint64_t stamp_fenced() noexcept {
  const std::uint64_t t = stamp_now();
#if defined(__x86_64__)
  __builtin_ia32_lfence();
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return t;
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
