// Layer 4: ProfileResult -- what one profiled call or scope did to device memory.
//
// The counts come from the allocator's never-reset lifetime totals read at entry and exit, so
// memory_allocated / memory_freed are gross (a 1 GiB buffer allocated and freed inside the
// scope shows as 1 GiB each, net 0), and the peak comes from an allocator peak window opened
// for this interval alone: nested and concurrent scopes each get their own peak and
// torch-style max_memory_allocated is never reset by profiling. The allocator's counters are
// per allocator, not per thread: work of other threads during the interval is included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The result of one profiled call (profile_function) or scope (profile_context).
struct ProfileResult {
  /// The name given to profile_function / profile_context.
  std::string name;
  /// The device measured, as Device parses it ("cuda:0", "sim:2", "host").
  std::string device;
  /// Bytes allocated during the interval (gross, rounded block sizes); 0 at device level.
  std::int64_t memory_allocated = 0;
  /// Bytes freed during the interval (gross); 0 at device level.
  std::int64_t memory_freed = 0;
  /// Wall time of the interval in seconds (after a device synchronize at both ends when the
  /// profiler synchronizes).
  double execution_time = 0.0;
  /// Allocations made during the interval (C++ has no tensors: every allocation counts).
  std::int64_t tensors_created = 0;
  /// Frees made during the interval.
  std::int64_t tensors_deleted = 0;
  MemorySnapshot memory_before;
  MemorySnapshot memory_after;
  /// The highest reading of the interval: allocated_memory (allocator level) or
  /// device_used_memory (device level) is the interval's peak; the other fields are the larger
  /// of the before and after readings (only the allocated peak is tracked per interval).
  MemorySnapshot memory_peak;
  /// The message of the exception that left the body; nullopt when it completed normally.
  std::optional<std::string> exception_message;
  /// False in device-level mode: the allocator-level fields are unavailable.
  bool allocator_level = true;
  /// Scopes of the same profiler open around this one on its thread when it began (0: an
  /// outermost scope). The summary's totals count outermost scopes only.
  std::uint32_t depth = 0;

  /// Net change in bytes over the interval: memory_allocated - memory_freed (allocator level),
  /// or the change of the device's used memory (device level).
  [[nodiscard]] std::int64_t memory_diff() const noexcept {
    if (allocator_level) return memory_allocated - memory_freed;
    return memory_after.device_used_memory.value_or(0) - memory_before.device_used_memory.value_or(0);
  }

  /// The highest memory use during the interval in absolute bytes, including what was already
  /// allocated when it began: allocated bytes (what max_memory_allocated would say had it been
  /// reset at the start) at allocator level, the device's used memory (as far as readings saw
  /// it) at device level. A call that allocates 1 MiB while 100 MiB is held reports 101 MiB.
  [[nodiscard]] std::int64_t peak_memory_usage() const noexcept {
    if (allocator_level) return memory_peak.allocated_memory;
    return memory_peak.device_used_memory.value_or(0);
  }

  /// How far the interval's peak rose above the level at its start, in bytes:
  /// peak_memory_usage() minus the allocated bytes (device level: used memory) when it began.
  /// The call's own footprint, whatever was held before: a per-step budget. Never negative.
  [[nodiscard]] std::int64_t peak_increase() const noexcept {
    const std::int64_t start =
        allocator_level ? memory_before.allocated_memory : memory_before.device_used_memory.value_or(0);
    return peak_memory_usage() > start ? peak_memory_usage() - start : 0;
  }

  /// True when the body threw.
  [[nodiscard]] bool threw() const noexcept { return exception_message.has_value(); }
};

GPUMEMPROF_NAMESPACE_END
