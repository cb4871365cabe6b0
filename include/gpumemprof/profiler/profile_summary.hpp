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

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
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
  void add(const ProfileResult& r) {
    auto it = functions_.find(std::string_view(r.name));
    if (it == functions_.end()) it = functions_.emplace(r.name, FunctionSummary{}).first;
    FunctionSummary& f = it->second;
    const std::int64_t diff = r.memory_diff();
    const std::int64_t peak = r.peak_memory_usage();
    f.call_count += 1;
    f.total_time += r.execution_time;
    f.total_memory_allocated += r.memory_allocated;
    f.peak_memory = f.call_count == 1 ? peak : std::max(f.peak_memory, peak);
    f.net_memory_change += diff;
    f.exceptions += r.threw() ? 1 : 0;
    calls_ += 1;
    peak_ = calls_ == 1 ? peak : std::max(peak_, peak);
    if (r.depth != 0) {  // inside an outer scope, whose figures already include it
      ++nested_;
      return;
    }
    time_ += r.execution_time;
    allocated_ += r.memory_allocated;
    freed_ += r.memory_freed;
    net_ += diff;
  }

  void clear() { *this = SummaryAccumulator{}; }

  /// Fills the call-derived fields of `s`.
  void fill(ProfileSummary& s) const {
    s.total_functions_profiled = functions_.size();
    s.total_function_calls = calls_;
    s.nested_function_calls = nested_;
    s.total_execution_time = time_;
    s.total_memory_allocated = allocated_;
    s.total_memory_freed = freed_;
    s.net_memory_change = net_;
    s.peak_memory_usage = peak_;
    s.function_summaries = functions_;
    for (auto& [name, f] : s.function_summaries) {
      const auto n = static_cast<double>(f.call_count);
      f.avg_time = f.total_time / n;
      f.avg_memory_allocated = static_cast<double>(f.total_memory_allocated) / n;
    }
  }

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
[[nodiscard]] inline std::string format_seconds(double seconds) {
  char buf[48];
  const double a = seconds < 0 ? -seconds : seconds;
  if (a < 1e-6) {
    std::snprintf(buf, sizeof buf, "%.0f ns", seconds * 1e9);
  } else if (a < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2f us", seconds * 1e6);
  } else if (a < 1.0) {
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  }
  return buf;
}

/// The summary as a text table, one row per name, most total time first.
[[nodiscard]] inline std::string format_summary(const ProfileSummary& s) {
  const auto size_or_na = [&](double bytes) {
    return s.allocator_level ? format_size(static_cast<std::uint64_t>(bytes < 0 ? 0 : bytes)) : std::string("n/a");
  };
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "GPU memory profile: %s (%s level)\n", s.device.c_str(),
                s.allocator_level ? "allocator" : "device");
  out += line;
  std::snprintf(line, sizeof line,
                "  %" PRIu64 " calls of %" PRIu64 " names (%" PRIu64
                " nested in other scopes), %s in outermost scopes; "
                "peak allocated since baseline %s, net change %s\n",
                s.total_function_calls, s.total_functions_profiled, s.nested_function_calls,
                format_seconds(s.total_execution_time).c_str(),
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.peak_memory_usage))).c_str(),
                format_size_change(s.net_memory_change).c_str());
  out += line;
  std::snprintf(line, sizeof line, "  %s: %s at baseline, %s now (%s); allocated in outermost calls %s, freed %s\n",
                s.allocator_level ? "allocated" : "device used",
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.baseline_memory_usage))).c_str(),
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.current_memory_usage))).c_str(),
                format_size_change(s.memory_change_from_baseline).c_str(),
                size_or_na(static_cast<double>(s.total_memory_allocated)).c_str(),
                size_or_na(static_cast<double>(s.total_memory_freed)).c_str());
  out += line;
  std::snprintf(line, sizeof line, "  monitoring %s, %" PRIu64 " samples held", s.monitoring_active ? "on" : "off",
                s.snapshots_collected);
  out += line;
  if (s.results_dropped != 0) {
    std::snprintf(line, sizeof line, "; %" PRIu64 " oldest results dropped from the buffer", s.results_dropped);
    out += line;
  }
  out += "\n";
  if (s.function_summaries.empty()) return out + "  (no calls profiled)\n";

  std::vector<const std::pair<const std::string, FunctionSummary>*> rows;
  std::size_t width = 8;  // "function"
  for (const auto& entry : s.function_summaries) {
    rows.push_back(&entry);
    width = std::max(width, std::min<std::size_t>(entry.first.size(), 40));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto* a, const auto* b) { return a->second.total_time > b->second.total_time; });
  const int w = static_cast<int>(width);
  out +=
      "\n  per call: avg time, avg allocated; totals over the name's calls: calls, total time, net change;\n"
      "  peak: highest allocated bytes in any call. A row includes the scopes nested in its calls.\n";
  std::snprintf(line, sizeof line, "  %-*s %8s %12s %12s %14s %14s %14s\n", w, "function", "calls", "avg time",
                "total time", "avg allocated", "net change", "peak");
  out += line;
  for (const auto* row : rows) {
    const FunctionSummary& f = row->second;
    std::string name = row->first.size() > width ? row->first.substr(0, width - 3) + "..." : row->first;
    std::snprintf(line, sizeof line, "  %-*s %8" PRIu64 " %12s %12s %14s %14s %14s", w, name.c_str(), f.call_count,
                  format_seconds(f.avg_time).c_str(), format_seconds(f.total_time).c_str(),
                  size_or_na(f.avg_memory_allocated).c_str(), format_size_change(f.net_memory_change).c_str(),
                  format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.peak_memory))).c_str());
    out += line;
    if (f.exceptions != 0) out += "  (" + std::to_string(f.exceptions) + " threw)";
    out += "\n";
  }
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const ProfileSummary& s) { return os << format_summary(s); }

GPUMEMPROF_NAMESPACE_END
