// Layer 2: MemoryStats' reads by PyTorch's flat keys (as_map, at). Included by memory_stats.hpp in
// header-only mode; compiled once in the library (lib/memory_stats.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct MemoryStats::StatKey {
  std::string_view name, pool, metric;
  [[nodiscard]] std::string str() const {
    std::string s(name);
    if (!pool.empty()) s.append(".").append(pool);
    if (!metric.empty()) s.append(".").append(metric);
    return s;
  }
  [[nodiscard]] bool operator==(std::string_view key) const noexcept {
    auto take = [&key](std::string_view part, bool dot) {
      if (dot) {
        if (key.empty() || key.front() != '.') return false;
        key.remove_prefix(1);
      }
      if (key.substr(0, part.size()) != part) return false;
      key.remove_prefix(part.size());
      return true;
    };
    return take(name, false) && (pool.empty() || take(pool, true)) && (metric.empty() || take(metric, true)) &&
           key.empty();
  }
};

template <class F>
void MemoryStats::for_each_key(F&& f) const {
  static constexpr std::array<std::string_view, 4> metrics = {"current", "peak", "allocated", "freed"};
  auto stat = [&f](std::string_view name, std::string_view pool, const Stat& s) {
    const std::array<std::int64_t, 4> values = {s.current, s.peak, s.allocated, s.freed};
    for (std::size_t i = 0; i < metrics.size(); ++i) {
      if (f(StatKey{name, pool, metrics[i]}, values[i])) return true;
    }
    return false;
  };
#define GPUMEMPROF_VISIT_(name)                                 \
  for (std::size_t p = 0; p < 3; ++p) {                         \
    if (stat(#name, stat_pool_names[p], name.pools[p])) return; \
  }
  GPUMEMPROF_POOLED_STATS(GPUMEMPROF_VISIT_)
#undef GPUMEMPROF_VISIT_
#define GPUMEMPROF_VISIT_(name) \
  if (stat(#name, {}, name)) return;
  GPUMEMPROF_SINGLE_STATS(GPUMEMPROF_VISIT_)
#undef GPUMEMPROF_VISIT_
#define GPUMEMPROF_VISIT_(name) \
  if (f(StatKey{#name, {}, {}}, name)) return;
  GPUMEMPROF_COUNTERS(GPUMEMPROF_VISIT_)
#undef GPUMEMPROF_VISIT_
  (void)f(StatKey{"max_split_size", {}, {}}, max_split_size);
}

GPUMEMPROF_FUNC std::map<std::string, std::int64_t> MemoryStats::as_map() const {
  std::map<std::string, std::int64_t> m;
  for_each_key([&m](const StatKey& k, std::int64_t v) {
    m[k.str()] = v;
    return false;
  });
  return m;
}

GPUMEMPROF_FUNC std::int64_t MemoryStats::at(std::string_view key) const {
  std::optional<std::int64_t> found;
  for_each_key([&](const StatKey& k, std::int64_t v) {
    if (k == key) found = v;
    return found.has_value();
  });
  if (!found) {
    throw std::out_of_range("MemoryStats: no stat '" + std::string(key) +
                            "' (keys as torch.cuda.memory_stats(), e.g. 'allocated_bytes.all.peak', 'num_ooms')");
  }
  return *found;
}

GPUMEMPROF_NAMESPACE_END
