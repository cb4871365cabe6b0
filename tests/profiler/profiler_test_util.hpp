// Test helpers for the profiler tests: a caching allocator over a fresh simulated device, and a
// bounded wait for conditions a background thread makes true.
#pragma once

#include <chrono>
#include <cstddef>
#include <thread>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "../units.hpp"

namespace gmp = gpumemprof;


/// A 1 GiB simulated device under an allocator with PyTorch's default configuration.
struct SimDevice {
  explicit SimDevice(std::size_t capacity = GiB)
      : allocator(gmp::SimulatedBackend(gmp::SimulatedOptions{.capacity = capacity}), gmp::AllocatorConfig{}) {}
  void* alloc(std::size_t bytes) { return allocator.allocate(bytes); }
  void free(void* p) { allocator.deallocate(p); }
  gmp::SimulatedBackend& sim() { return allocator.backend(); }
  gmp::CachingAllocator<gmp::SimulatedBackend> allocator;
};

/// Polls `condition` until it holds or `limit` passes; returns whether it held. For waiting on
/// background threads: the test's correctness never depends on how long this takes.
template <class F>
bool eventually(F&& condition, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}
