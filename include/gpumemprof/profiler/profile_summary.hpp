// Layer 4: the profiler's summary (get_summary) and its printed table.
//
// The profiler folds every result into a SummaryAccumulator as it is recorded, so the summary
// stays exact however many results the bounded result buffer has dropped.
//
// Nested scopes: a scope's interval contains the scopes opened inside it on its thread, so the
// whole-profile totals (time, allocated, freed, net change) add outermost scopes only (depth 0);
// a name's row is inclusive (its calls' own figures, nested work included). The peak is one
// figure: the highest allocated bytes since the baseline, read from an allocator peak window
// (the tracker and `gpumemprof summary` report the same peak for the same run).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/profile_result.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Aggregates of the calls of one name. Times in seconds, memory in bytes.
struct FunctionSummary {
  std::uint64_t call_count = 0;
  double total_time = 0.0;
  double avg_time = 0.0;
  /// Gross bytes allocated, summed over calls (0 at device level).
  std::int64_t total_memory_allocated = 0;
  /// Gross bytes allocated per call (0 at device level).
  double avg_memory_allocated = 0.0;
  /// The highest peak_memory_usage() of any call.
  std::int64_t peak_memory = 0;
  /// Sum of memory_diff() over calls.
  std::int64_t net_memory_change = 0;
  /// Calls whose body threw.
  std::uint64_t exceptions = 0;
};

/// What GPUMemoryProfiler::get_summary() returns. Memory in bytes, times in seconds.
struct ProfileSummary {
  std::string device;
  /// False in device-level mode: allocation totals are unavailable (printed "n/a").
  bool allocator_level = true;
  /// Distinct names profiled.
  std::uint64_t total_functions_profiled = 0;
  /// Profiled calls and scopes recorded, nested ones included.
  std::uint64_t total_function_calls = 0;
  /// Of those, the calls made inside another profiled scope (not added to the totals below).
  std::uint64_t nested_function_calls = 0;
  /// Totals over outermost calls only, so nested scopes are not counted twice.
  double total_execution_time = 0.0;
  std::int64_t total_memory_allocated = 0;
  std::int64_t total_memory_freed = 0;
  /// Sum of memory_diff() over outermost calls.
  std::int64_t net_memory_change = 0;
  /// The highest allocated bytes (device used at device level) since the baseline, inside
  /// profiled calls or not: max_memory_allocated as if reset at the baseline.
  std::int64_t peak_memory_usage = 0;
  /// Allocated bytes now (device used memory at device level).
  std::int64_t current_memory_usage = 0;
  /// The same at the baseline (construction or clear_results()).
  std::int64_t baseline_memory_usage = 0;
  std::int64_t memory_change_from_baseline = 0;
  bool monitoring_active = false;
  /// Monitoring samples held now.
  std::uint64_t snapshots_collected = 0;
  /// Results dropped from the bounded result buffer (they still count above).
  std::uint64_t results_dropped = 0;
  std::map<std::string, FunctionSummary, std::less<>> function_summaries;
};

namespace detail {

/// Running totals of recorded results.
class SummaryAccumulator {
 public:
  void add(const ProfileResult& r);

  void clear() { *this = SummaryAccumulator{}; }

  /// Fills the call-derived fields of `s`.
  void fill(ProfileSummary& s) const;

 private:
  std::map<std::string, FunctionSummary, std::less<>> functions_;
  std::uint64_t calls_ = 0;
  std::uint64_t nested_ = 0;
  double time_ = 0.0;
  std::int64_t allocated_ = 0;
  std::int64_t freed_ = 0;
  std::int64_t net_ = 0;
  std::int64_t peak_ = 0;
};

}  // namespace detail

/// A duration in seconds in words: "850 ns", "12.34 us", "1.234 ms", "2.500 s".
[[nodiscard]] std::string format_seconds(double seconds);

/// The summary as a text table, one row per name, most total time first.
[[nodiscard]] std::string format_summary(const ProfileSummary& s);

std::ostream& operator<<(std::ostream& os, const ProfileSummary& s);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/profile_summary-inl.hpp"
#endif
