// Layer 4: the process's own host memory (resident set size), for MemorySnapshot::cpu_memory.
//
// Linux only: /proc/self/statm's second field, in pages. Opening the file costs ~1.5 us, so the
// descriptor stays open and each reading is one pread (~0.4 us). /proc/self is resolved when
// the file is opened, so a forked child drops the parent's descriptor (pthread_atfork) and
// opens its own on the next reading.
#pragma once

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <mutex>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

inline std::atomic<int>& statm_fd() noexcept {
  static std::atomic<int> fd{-1};
  return fd;
}

inline int open_statm() noexcept {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    (void)::pthread_atfork(nullptr, nullptr, [] {
      const int old = statm_fd().exchange(-1);
      if (old >= 0) ::close(old);
    });
  });
  int fd = statm_fd().load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  const int mine = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (mine < 0) return -1;
  if (statm_fd().compare_exchange_strong(fd, mine, std::memory_order_acq_rel)) return mine;
  ::close(mine);  // another thread won the race; use its descriptor
  return fd;
}

}  // namespace detail

/// Resident set size of this process in bytes; 0 when it cannot be read (not Linux, no /proc).
/// Thread-safe; about 0.4 us.
[[nodiscard]] inline std::int64_t process_rss_bytes() noexcept {
  const int fd = detail::open_statm();
  if (fd < 0) return 0;
  char buf[128];
  const ::ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  if (n <= 0) return 0;
  // "size resident shared text lib data dt": skip the first field.
  const char* p = buf;
  const char* end = buf + n;
  while (p != end && *p != ' ') ++p;
  if (p != end) ++p;
  std::int64_t pages = 0;
  if (std::from_chars(p, end, pages).ec != std::errc()) return 0;
  static const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages * (page_size > 0 ? page_size : 4096);
}

GPUMEMPROF_NAMESPACE_END
