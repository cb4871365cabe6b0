// Layer 2: every byte on a device -- device_memory(device) puts the driver's count of used memory
// beside what explains it: the allocator's reserved segments, external allocations by owner
// (libraries' own cudaMalloc), module code, the CUDA context, and what is left unattributed.
//
//   used = reserved + external + code + context + unattributed
//
// External memory, code and context come from the device's ledger (device/external_memory.hpp):
// on a simulated device from sim_external_malloc and its configured context size, on a CUDA
// device from the capture that track_external_memory() starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The memory of one device, all of it. Byte values in bytes.
struct DeviceMemory {
  std::string device;      ///< "cuda:0", "sim:1"
  std::size_t total = 0;   ///< the device's capacity
  std::size_t used = 0;    ///< total - free, the driver's view (includes other processes)
  std::size_t allocated = 0;  ///< in the allocator's live blocks (memory_allocated)
  std::size_t reserved = 0;   ///< in the allocator's segments (memory_reserved)
  std::size_t external = 0;   ///< live allocations outside the allocator, all owners
  std::vector<OwnerMemory> external_by_owner;  ///< most bytes first
  std::size_t code = 0;                        ///< module code and data loaded by the driver
  std::vector<OwnerMemory> code_by_owner;      ///< most bytes first
  std::size_t context = 0;                     ///< the CUDA context
  bool tracking = false;  ///< whether external allocations are captured (else external is 0)
  /// used - reserved - external - code - context: what nothing above explains (other processes,
  /// allocations before tracking started, the driver's rounding). Negative only when the driver's
  /// count lags the ledger.
  std::int64_t unattributed = 0;
};

/// The ledger of `allocator`'s device with the allocator's own figures.
template <DeviceBackend B>
[[nodiscard]] DeviceMemory device_memory(const CachingAllocator<B>& allocator) {
  DeviceMemory m;
  m.device = allocator.device_name();
  const MemInfo info = allocator.mem_get_info();
  m.total = info.total;
  m.used = info.total - std::min(info.total, info.free);
  const AllocatorGauges g = allocator.gauges();
  m.allocated = static_cast<std::size_t>(g.allocated_bytes);
  m.reserved = static_cast<std::size_t>(g.reserved_bytes);
  if constexpr (requires { allocator.backend().external_memory(); }) {
    ExternalMemory x = allocator.backend().external_memory();
    m.external = x.allocations;
    m.external_by_owner = std::move(x.by_owner);
    m.code = x.code;
    m.code_by_owner = std::move(x.code_by_owner);
    m.context = x.context;
    m.tracking = x.tracking;
  }
  m.unattributed = static_cast<std::int64_t>(m.used) - static_cast<std::int64_t>(m.reserved) -
                   static_cast<std::int64_t>(m.external) - static_cast<std::int64_t>(m.code) -
                   static_cast<std::int64_t>(m.context);
  return m;
}

/// The memory of `device`, with its default allocator's figures.
[[nodiscard]] inline DeviceMemory device_memory(const Device& device = Device()) {
  return device_memory(default_allocator(device));
}

/// On simulated device `device`: stands for a library's own cudaMalloc of `bytes` by `owner`
/// ("libnccl.so") from `site`. The device's free memory shrinks by whole granules (2 MiB), so the
/// default allocator can run out of memory because of it; device_memory() lists it under `owner`.
/// nullptr when the device has no room.
/// With stacks on (track_external_memory({.stacks = true})) the ledger keeps the caller's stack.
[[nodiscard]] void* sim_external_malloc(const Device& device, std::size_t bytes, std::string_view owner,
                                        std::string_view site = {});

/// Frees what sim_external_malloc returned on `device`.
void sim_external_free(const Device& device, void* ptr);

namespace detail {
inline std::string signed_size(std::int64_t v) {
  return v < 0 ? "-" + format_size(static_cast<std::uint64_t>(-v)) : format_size(static_cast<std::uint64_t>(v));
}
inline std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}
}  // namespace detail

/// "14.00 GiB held by libnccl.so, 2.10 GiB CUDA context, ..." -- what besides the allocator holds
/// the device, largest owners first (at most `owners` of them); "" when nothing does.
[[nodiscard]] inline std::string describe_outside_allocator(const DeviceMemory& m, std::size_t owners = 3) {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  for (std::size_t i = 0; i < m.external_by_owner.size() && i < owners; ++i) {
    add(format_size(m.external_by_owner[i].bytes) + " held by " + m.external_by_owner[i].owner);
  }
  if (m.external_by_owner.size() > owners) {
    std::size_t rest = 0;
    for (std::size_t i = owners; i < m.external_by_owner.size(); ++i) rest += m.external_by_owner[i].bytes;
    add(format_size(rest) + " held by " + detail::plural(m.external_by_owner.size() - owners, "other owner",
                                                         "other owners"));
  }
  if (m.context != 0) add(format_size(m.context) + " CUDA context");
  if (m.code != 0) add(format_size(m.code) + " module code");
  if (m.unattributed != 0) add(detail::signed_size(m.unattributed) + " unattributed");
  return out;
}

namespace detail {
/// ", most from SITE" (", most from:" when the stack that follows starts with the site); "" when
/// the site is unknown.
[[nodiscard]] inline std::string most_from(const OwnerMemory& o) {
  if (o.top_site.empty()) return {};
  return !o.top_stack.empty() && o.top_stack.front() == o.top_site ? ", most from:" : ", most from " + o.top_site;
}
}  // namespace detail

/// The stack of `o`'s top site, one frame a line after `indent` ("" when none was recorded), at
/// most `max_frames` frames.
[[nodiscard]] inline std::string format_top_stack(const OwnerMemory& o, const std::string& indent,
                                                  std::size_t max_frames = 6) {
  std::string out;
  for (std::size_t i = 0; i < o.top_stack.size() && i < max_frames; ++i) out += indent + o.top_stack[i] + "\n";
  if (o.top_stack.size() > max_frames) {
    out += indent + "... " + detail::plural(o.top_stack.size() - max_frames, "more frame", "more frames") + "\n";
  }
  return out;
}

/// The device's memory as text, one line a part, each indented by `indent`.
[[nodiscard]] inline std::string format_device_memory(const DeviceMemory& m, const std::string& indent = "") {
  std::string out;
  auto row = [&](const std::string& label, const std::string& value, const std::string& note = {}) {
    std::string l = indent + label;
    if (l.size() < indent.size() + 26) l.append(indent.size() + 26 - l.size(), ' ');
    out += l + value + (note.empty() ? "" : "  " + note) + "\n";
  };
  out += indent + "device " + m.device + ": " + format_size(m.used) + " used of " + format_size(m.total) +
         " (the driver's count)\n";
  row("  allocator reserved", format_size(m.reserved),
      "(" + format_size(m.allocated) + " allocated, " + format_size(m.reserved - std::min(m.reserved, m.allocated)) +
          " cached)");
  row("  external allocations", format_size(m.external),
      m.tracking ? std::string() : std::string("(not tracked: gmp::track_external_memory() or GPUMEMPROF_TRACK_EXTERNAL=1)"));
  for (const OwnerMemory& o : m.external_by_owner) {
    row("    " + o.owner, format_size(o.bytes),
        "in " + detail::plural(o.count, "allocation", "allocations") + detail::most_from(o));
    out += format_top_stack(o, indent + "        ");
  }
  if (m.code != 0 || !m.code_by_owner.empty()) {
    row("  module code", format_size(m.code));
    for (const OwnerMemory& o : m.code_by_owner) {
      row("    " + o.owner, format_size(o.bytes), "in " + detail::plural(o.count, "module", "modules"));
    }
  }
  row("  CUDA context", format_size(m.context));
  row("  unattributed", detail::signed_size(m.unattributed));
  return out;
}

GPUMEMPROF_NAMESPACE_END

// The simulated device's side (sim_external_malloc, sim_external_free): in the compiled library
// under GPUMEMPROF_COMPILED_LIB (lib/device.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/device_memory-inl.hpp"
#endif
