// Layer 0 (ground floor): N independent copies of a structure, each with its own SpinLock and on
// its own cache lines, picked by a hash -- a table that threads touching different keys update
// without sharing a lock or a line. Whole-table readers keep every writer out by other means.
#pragma once

#include <array>
#include <cstddef>

#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/spin_lock.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

template <class T, std::size_t N>
class LockedShards {
  static_assert(N != 0 && (N & (N - 1)) == 0, "LockedShards: N must be a power of two");

 public:
  struct alignas(64) Shard {
    SpinLock lock;
    T value GPUMEMPROF_GUARDED_BY(lock);
  };
  static constexpr std::size_t size = N;

  /// The shard for `hash` (only its low bits are used: pass a well-mixed hash).
  [[nodiscard]] Shard& at(std::size_t hash) noexcept { return shards_[hash & (N - 1)]; }
  [[nodiscard]] const Shard& at(std::size_t hash) const noexcept { return shards_[hash & (N - 1)]; }

  /// Visits every shard's value; the caller keeps every writer out (the allocator holds all its
  /// stream shards, whose holders alone write here) or is alone.
  template <class F>
  void for_each(F&& f) const GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& s : shards_) f(s.value);
  }

 private:
  mutable std::array<Shard, N> shards_{};
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
