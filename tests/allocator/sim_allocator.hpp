// Test helper: a caching allocator over a fresh simulated device.
#pragma once

#include <string_view>

#include "../units.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"

namespace gmp = gpumemprof;

using SimAllocator = gmp::CachingAllocator<gmp::SimulatedBackend>;

/// A simulated device of `capacity` bytes under an allocator configured by `conf`.
struct SimAlloc {
  explicit SimAlloc(std::string_view conf = "", std::size_t capacity = 80 * GiB, bool auto_complete_events = false)
      : a(gmp::SimulatedBackend(gmp::SimulatedOptions{capacity, 0, 2 * MiB, auto_complete_events}),
          gmp::AllocatorConfig(conf)) {}
  gmp::MemoryStats stats() const { return a.memory_stats(); }
  gmp::SimulatedBackend& sim() { return a.backend(); }
  SimAllocator a;
};

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// The pool of the segment of `a` that holds `p`; {~0, ~0} (no pool's id) when no segment does.
inline gmp::MempoolId pool_of(const SimAllocator& a, const void* p) {
  for (const auto& s : a.segments()) {
    if (addr(p) >= s.address && addr(p) < s.address + s.size) return s.pool_id;
  }
  return {~std::uint64_t{0}, ~std::uint64_t{0}};
}
