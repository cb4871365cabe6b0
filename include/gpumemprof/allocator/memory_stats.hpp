// Layer 2: the allocator's statistics, with PyTorch's schema (torch.cuda.memory_stats()).
//
// The stats are declared once, in the X-lists below; the struct, as_map() (PyTorch's exact key
// strings) and every exporter are generated from these lists, so a key cannot be misspelt in
// one place only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

// Stats kept per pool (all / small_pool / large_pool). Key: "<name>.<pool>.<metric>".
#define GPUMEMPROF_POOLED_STATS(X) \
  X(allocation)                    \
  X(segment)                       \
  X(active)                        \
  X(inactive_split)                \
  X(allocated_bytes)               \
  X(reserved_bytes)                \
  X(active_bytes)                  \
  X(inactive_split_bytes)          \
  X(requested_bytes)

// Stats kept once. Key: "<name>.<metric>".
#define GPUMEMPROF_SINGLE_STATS(X) \
  X(oversize_allocations)          \
  X(oversize_segments)

// Plain counters. Key: "<name>".
#define GPUMEMPROF_COUNTERS(X) \
  X(num_alloc_retries)         \
  X(num_ooms)                  \
  X(num_sync_all_streams)      \
  X(num_device_alloc)          \
  X(num_device_free)

/// One statistic: the current value, its peak since the last reset_peak(), and the totals
/// added (allocated) and removed (freed) since the last reset_accumulated().
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void increase(std::int64_t n) noexcept {
    current += n;
    peak = std::max(peak, current);
    allocated += n;
  }
  void decrease(std::int64_t n) noexcept {
    current -= n;
    freed += n;
  }
  void reset_peak() noexcept { peak = current; }
  void reset_accumulated() noexcept { allocated = freed = 0; }
  friend bool operator==(const Stat&, const Stat&) = default;
};

enum class StatPool : std::uint8_t { all = 0, small_pool = 1, large_pool = 2 };
inline constexpr std::array<const char*, 3> stat_pool_names = {"all", "small_pool", "large_pool"};

/// A Stat for the aggregate and for each pool; index with StatPool.
struct StatArray {
  std::array<Stat, 3> pools{};
  Stat& operator[](StatPool p) noexcept { return pools[static_cast<std::size_t>(p)]; }
  const Stat& operator[](StatPool p) const noexcept { return pools[static_cast<std::size_t>(p)]; }
  /// The aggregate ("all") stat.
  [[nodiscard]] const Stat& all() const noexcept { return pools[0]; }
  /// Changes the aggregate and pool `p` by `n`.
  void increase(StatPool p, std::int64_t n) noexcept {
    pools[0].increase(n);
    (*this)[p].increase(n);
  }
  void decrease(StatPool p, std::int64_t n) noexcept {
    pools[0].decrease(n);
    (*this)[p].decrease(n);
  }
  friend bool operator==(const StatArray&, const StatArray&) = default;
};

/// The allocator's statistics (all byte values in bytes).
struct MemoryStats {
#define GPUMEMPROF_DECLARE_(name) StatArray name;
  GPUMEMPROF_POOLED_STATS(GPUMEMPROF_DECLARE_)
#undef GPUMEMPROF_DECLARE_
#define GPUMEMPROF_DECLARE_(name) Stat name;
  GPUMEMPROF_SINGLE_STATS(GPUMEMPROF_DECLARE_)
#undef GPUMEMPROF_DECLARE_
#define GPUMEMPROF_DECLARE_(name) std::int64_t name = 0;
  GPUMEMPROF_COUNTERS(GPUMEMPROF_DECLARE_)
#undef GPUMEMPROF_DECLARE_
  /// The configured max_split_size in bytes; -1 when unlimited.
  std::int64_t max_split_size = -1;

  /// Every stat under PyTorch's flat key ("allocated_bytes.all.current", "num_ooms", ...),
  /// sorted by key as torch.cuda.memory_stats() returns them.
  [[nodiscard]] std::map<std::string, std::int64_t> as_map() const;

  /// The stat under PyTorch's key, as `stats["allocated_bytes.all.peak"]` in PyTorch; the keys
  /// are exactly as_map()'s. Throws std::out_of_range naming an unknown key.
  [[nodiscard]] std::int64_t at(std::string_view key) const;
  /// Same as at(key).
  [[nodiscard]] std::int64_t operator[](std::string_view key) const { return at(key); }

  /// Applies `f(stat)` to every Stat (pooled and single).
  template <class F>
  void for_each_stat(F&& f) {
#define GPUMEMPROF_EACH_(name) \
  for (auto& s : name.pools) f(s);
    GPUMEMPROF_POOLED_STATS(GPUMEMPROF_EACH_)
#undef GPUMEMPROF_EACH_
#define GPUMEMPROF_EACH_(name) f(name);
    GPUMEMPROF_SINGLE_STATS(GPUMEMPROF_EACH_)
#undef GPUMEMPROF_EACH_
  }

  /// peak = current for every stat (torch.cuda.reset_peak_memory_stats).
  void reset_peak() {
    for_each_stat([](Stat& s) { s.reset_peak(); });
  }
  /// allocated = freed = 0 for every stat, and the counters to 0
  /// (torch.cuda.reset_accumulated_memory_stats).
  void reset_accumulated() {
    for_each_stat([](Stat& s) { s.reset_accumulated(); });
#define GPUMEMPROF_ZERO_(name) name = 0;
    GPUMEMPROF_COUNTERS(GPUMEMPROF_ZERO_)
#undef GPUMEMPROF_ZERO_
  }

  friend bool operator==(const MemoryStats&, const MemoryStats&) = default;

 private:
  /// A flat key in pieces ("allocated_bytes", "all", "peak"; counters: the name alone), so a
  /// lookup compares without building strings.
  struct StatKey;

  /// The one list of keys: calls `f(key, value)` for each in as_map()'s set until f returns true.
  template <class F>
  void for_each_key(F&& f) const;
};

GPUMEMPROF_NAMESPACE_END

// The keyed reads: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/memory_stats.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/memory_stats-inl.hpp"
#endif
