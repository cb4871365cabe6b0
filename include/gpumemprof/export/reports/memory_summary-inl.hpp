// Layer 5: memory_summary()'s bodies (memory_summary.hpp declares them). Included by that header
// in header-only mode; compiled once in the library (lib/reports.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/reports/memory_summary.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

// PyTorch's _format_size and _format_count: divide by `base` while the row's reference value
// is at least `threshold` of the next unit, then print with the unit.
GPUMEMPROF_FUNC std::string summary_scaled(std::int64_t v, std::int64_t ref, double base, double threshold,
                                           std::initializer_list<const char*> units, const char* format) {
  const char* unit = *units.begin();
  double r = static_cast<double>(ref);
  for (auto it = units.begin() + 1; it != units.end() && r >= threshold * base; ++it) {
    unit = *it;
    v /= static_cast<std::int64_t>(base);
    r /= base;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, format, static_cast<long long>(v), unit);
  return buf;
}
GPUMEMPROF_FUNC std::string summary_size(std::int64_t sz, std::int64_t ref) {
  return summary_scaled(sz, ref, 1024.0, 768.0, {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}, "%6lld %s");
}
GPUMEMPROF_FUNC std::string summary_count(std::int64_t n, std::int64_t ref) {
  return summary_scaled(n, ref, 1000.0, 750.0, {" ", "K", "M"}, "%7lld %s ");
}

GPUMEMPROF_FUNC std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace detail

GPUMEMPROF_FUNC std::string memory_summary(const MemoryStats& stats, const std::string& device_name, bool abbreviated) {
  using detail::pad;
  std::vector<std::string> lines;
  const std::string rule(75, '-');
  const std::string double_rule(75, '=');
  lines.push_back(double_rule);
  lines.push_back(pad(" " + std::string(16, ' ') + " gpumemprof memory summary, device " + device_name, 75));
  lines.push_back(rule);
  lines.push_back(pad("  " + std::string(9, ' ') + " CUDA OOMs: " + pad(std::to_string(stats.num_ooms), 12) + " | " +
                          std::string(6, ' ') +
                          " cudaMalloc retries: " + pad(std::to_string(stats.num_alloc_retries), 8),
                      75));
  lines.push_back(double_rule);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  using Format = std::string (*)(std::int64_t, std::int64_t);
  auto row = [&](const std::string& name, const Stat& s, const Stat& ref, Format f) {
    lines.push_back(" " + pad(name, 21) + " | " + f(s.current, ref.current) + " | " + f(s.peak, ref.peak) + " | " +
                    f(s.allocated, ref.allocated) + " | " + f(s.freed, ref.freed) + " ");
  };
  struct Metric {
    const StatArray* stat;
    const char* name;
    Format format;
  };
  const Metric metrics[] = {
      {&stats.allocated_bytes, "Allocated memory", detail::summary_size},
      {&stats.active_bytes, "Active memory", detail::summary_size},
      {&stats.requested_bytes, "Requested memory", detail::summary_size},
      {&stats.reserved_bytes, "GPU reserved memory", detail::summary_size},
      {&stats.inactive_split_bytes, "Non-releasable memory", detail::summary_size},
      {&stats.allocation, "Allocations", detail::summary_count},
      {&stats.active, "Active allocs", detail::summary_count},
      {&stats.segment, "GPU reserved segments", detail::summary_count},
      {&stats.inactive_split, "Non-releasable allocs", detail::summary_count},
  };
  for (const Metric& m : metrics) {
    lines.push_back(rule);
    const Stat& all = (*m.stat)[StatPool::all];
    row(m.name, all, all, m.format);
    if (!abbreviated) {
      row("      from large pool", (*m.stat)[StatPool::large_pool], all, m.format);
      row("      from small pool", (*m.stat)[StatPool::small_pool], all, m.format);
    }
  }
  lines.push_back(rule);
  row("Oversize allocations", stats.oversize_allocations, stats.oversize_allocations, detail::summary_count);
  lines.push_back(rule);
  row("Oversize GPU segments", stats.oversize_segments, stats.oversize_segments, detail::summary_count);
  lines.push_back(double_rule);

  std::string out;
  for (const std::string& l : lines) out += "|" + l + "|\n";
  return out;
}

GPUMEMPROF_FUNC std::string format_pool_stats(const std::vector<PoolStats>& pools) {
  if (pools.empty()) return {};
  std::string out = "Private pools (the table above counts them too):\n";
  char buf[256];
  for (const PoolStats& p : pools) {
    std::snprintf(buf, sizeof buf, "  pool (%llu, %llu) %-5s %10s reserved in %lld %s, %10s allocated, %d %s\n",
                  static_cast<unsigned long long>(p.id.first), static_cast<unsigned long long>(p.id.second),
                  p.id.first != 0 ? "graph" : "user", format_size(static_cast<std::uint64_t>(p.reserved_bytes)).c_str(),
                  static_cast<long long>(p.segments), p.segments == 1 ? "segment" : "segments",
                  format_size(static_cast<std::uint64_t>(p.allocated_bytes)).c_str(), p.use_count,
                  p.use_count == 1 ? "user" : "users");
    out += buf;
  }
  return out;
}

GPUMEMPROF_FUNC std::string memory_summary(const Device& device, bool abbreviated) {
  DeviceAllocator& a = default_allocator(device);
  return memory_summary(a.memory_stats(), device.str(), abbreviated) + format_pool_stats(a.all_pool_stats()) +
         format_device_memory(device_memory(device));
}

GPUMEMPROF_NAMESPACE_END
