// Layer 4: the profiler's summary -- folding results and printing the table. Included by
// profile_summary.hpp in header-only mode; compiled once in the library (lib/profiler.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/profile_summary.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

GPUMEMPROF_FUNC void SummaryAccumulator::add(const ProfileResult& r) {
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

GPUMEMPROF_FUNC void SummaryAccumulator::fill(ProfileSummary& s) const {
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

}  // namespace detail

GPUMEMPROF_FUNC std::string format_seconds(double seconds) {
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

GPUMEMPROF_FUNC std::string format_summary(const ProfileSummary& s) {
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
                "peak allocated since baseline %s, net change in those calls %s\n",
                s.total_function_calls, s.total_functions_profiled, s.nested_function_calls,
                format_seconds(s.total_execution_time).c_str(),
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.peak_memory_usage))).c_str(),
                format_size_change(s.net_memory_change).c_str());
  out += line;
  // The change since the baseline is the calls' net change plus what happened outside them
  // (between calls, or in scopes still open): say so, rather than print two numbers that differ.
  const std::int64_t outside = s.memory_change_from_baseline - s.net_memory_change;
  const std::string change =
      format_size_change(s.memory_change_from_baseline) +
      (outside != 0 ? ", of which " + format_size_change(outside) + " outside finished profiled calls" : std::string());
  std::snprintf(line, sizeof line, "  %s: %s at baseline, %s now (%s); allocated in outermost calls %s, freed %s\n",
                s.allocator_level ? "allocated" : "device used",
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.baseline_memory_usage))).c_str(),
                format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.current_memory_usage))).c_str(),
                change.c_str(), size_or_na(static_cast<double>(s.total_memory_allocated)).c_str(),
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

GPUMEMPROF_FUNC std::ostream& operator<<(std::ostream& os, const ProfileSummary& s) { return os << format_summary(s); }

GPUMEMPROF_NAMESPACE_END
