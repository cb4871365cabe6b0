// Layer 4: MemorySnapshot -- the memory of one device (and of the process) at one instant, as
// the profiler records it before, after and at the peak of a profiled scope, and as the
// background sampler records it.
//
// Two levels. At allocator level (the program allocates through a gpumemprof allocator) the
// allocated/reserved/active/inactive fields are the allocator's exact gauges. At device level
// (a program with its own allocator) only the device's own account is known
// (device_used_memory); allocator_level is false and the allocator fields are not meaningful.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#ifndef GPUMEMPROF_COMPILED_LIB  // compiled library: Frame is complete where history is included
#include "gpumemprof/history/snapshot.hpp"
#endif

GPUMEMPROF_NAMESPACE_BEGIN

struct Frame;  // history/snapshot.hpp
using Frames = std::shared_ptr<const std::vector<Frame>>;

/// The memory of one device at one instant. Byte values in bytes.
struct MemorySnapshot {
  /// When the reading was taken: seconds since the Unix epoch.
  double timestamp = 0.0;
  /// Bytes in allocated blocks (torch.cuda.memory_allocated; allocated_bytes.all.current).
  std::int64_t allocated_memory = 0;
  /// Bytes the allocator holds from the device (torch.cuda.memory_reserved).
  std::int64_t reserved_memory = 0;
  /// Allocated bytes plus bytes freed but still in use by pending stream work (active_bytes).
  std::int64_t active_memory = 0;
  /// Free bytes inside split segments, unusable for larger requests (inactive_split_bytes).
  std::int64_t inactive_memory = 0;
  /// Resident set size of the process in bytes; 0 unless the profiler tracks CPU memory.
  std::int64_t cpu_memory = 0;
  /// The device's index ("cuda:N" / "sim:N" -> N).
  int device_id = 0;
  /// What the reading belongs to: the scope name for a profiled scope, "monitoring" for the
  /// sampler, "baseline" for the profiler's baseline.
  std::string operation;
  /// False in device-level mode: the four allocator fields above are unavailable (not zero).
  bool allocator_level = true;
  /// total - free as the device reports it (cudaMemGetInfo), including memory no gpumemprof
  /// allocator owns; present where it was read (samples, device-level scopes).
  std::optional<std::int64_t> device_used_memory;
  /// The device's capacity in bytes; present with device_used_memory.
  std::optional<std::int64_t> device_total_memory;
  /// Bytes of live allocations on the device outside gpumemprof's allocators (libraries' own
  /// cudaMalloc, as the device's ledger knows them: see device_memory()); present with
  /// device_used_memory.
  std::optional<std::int64_t> external_memory;
  /// Where the snapshot was taken, innermost user frame first (gpumemprof's own frames are
  /// left out); empty (nullptr) unless the profiler collects stack traces and the build has
  /// them (GPUMEMPROF_WITH_STACKTRACE).
  Frames stack_trace;
};

namespace detail {

/// Seconds since the Unix epoch at steady-clock time `t`. The epoch offset is taken once, so a
/// timestamp costs one steady-clock read and timestamps never go backwards.
[[nodiscard]] inline double wall_seconds(std::chrono::steady_clock::time_point t) noexcept {
  static const double offset = [] {
    const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double steady = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return wall - steady;
  }();
  return offset + std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
