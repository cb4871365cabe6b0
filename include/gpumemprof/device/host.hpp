// Layer 1: host memory as a backend, so the caching allocator and its std adapters can serve
// ordinary containers (std::vector, std::pmr::vector) with real, usable memory.
// Host work is synchronous, so events are always complete.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <new>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class HostBackend {
 public:
  /// Alignment of every piece handed out, in bytes (the allocator's block granularity).
  static constexpr std::size_t alignment = 512;

  [[nodiscard]] void* malloc(std::size_t bytes) noexcept {
    return ::operator new (bytes, std::align_val_t{alignment}, std::nothrow);
  }
  void free(void* ptr) noexcept { ::operator delete (ptr, std::align_val_t{alignment}); }

  [[nodiscard]] MemInfo mem_get_info() const noexcept {
    const long page = ::sysconf(_SC_PAGESIZE);
    const long total = ::sysconf(_SC_PHYS_PAGES);
    const long avail = ::sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0 || avail < 0) return {};
    return {static_cast<std::size_t>(avail) * static_cast<std::size_t>(page),
            static_cast<std::size_t>(total) * static_cast<std::size_t>(page)};
  }

  [[nodiscard]] Event record_event(Stream /*stream*/) noexcept { return Event{1}; }
  [[nodiscard]] bool query_event(Event /*e*/) noexcept { return true; }
  void synchronize_event(Event /*e*/) noexcept {}
  void release_event(Event /*e*/) noexcept {}

  [[nodiscard]] int index() const noexcept { return 0; }
  [[nodiscard]] std::string name() const { return "host"; }
};

static_assert(DeviceBackend<HostBackend>);

GPUMEMPROF_NAMESPACE_END
