// Layer 5: memory over time by category -- torch.profiler's export_memory_timeline, from a
// snapshot's trace (analysis/timeline.hpp's allocated level, split by category).
//
// JSON (.json): exactly torch.profiler's layout, so existing scripts and plots read it:
//   [times_us, sizes], sizes[i] = [0, parameter, optimizer_state, input, temporary, activation,
//                                  gradient, autograd_detail, unknown]
// (column 0 unused, as torch writes it; user categories count as unknown). As in torch's
// _coalesce_timeline: one row per run of events sharing a microsecond, each row the bytes after
// that run; memory allocated before the trace is a first row at the first event's time.
//
// export_memory_timeline(path, device) writes either for the default allocator's recorded history.
//
// HTML (.html): one offline page, a stacked area of every category (user categories too) over
// time with bands for the annotated ranges (steps on their own row: "step N", "ProfilerStep#N",
// "train_step", "iteration N"), drawn as SVG in C++: no script, nothing fetched.
//
// Declarations only; the bodies are in memory_timeline-inl.hpp (the compiled library has them
// for Snapshot and CompactSnapshot under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class CategoryRules;  // analysis/category_rules.hpp

/// Writes torch.profiler's memory-timeline JSON for `device` of `snap` (see the header comment);
/// `rules` categorize entries that carry no category (analysis/category_rules.hpp).
template <SnapshotLike S>
void write_memory_timeline_json(const S& snap, int device, std::ostream& out, const CategoryRules* rules = nullptr);

/// The stacked-area timeline of every category of `device` as an SVG element with its legend
/// (HTML fragment); the standalone page and the HTML report embed it.
template <SnapshotLike S>
[[nodiscard]] std::string memory_timeline_svg(const S& snap, int device, const CategoryRules* rules = nullptr);

/// Writes the standalone HTML page (see the header comment).
template <SnapshotLike S>
void write_memory_timeline_html(const S& snap, int device, std::ostream& out,
                                std::string_view title = "Memory timeline", const CategoryRules* rules = nullptr);

/// Writes `device`'s timeline of `snap` to `path` atomically: torch.profiler's JSON when the
/// path ends in ".json", the HTML page when it ends in ".html"/".htm"; ConfigError otherwise.
template <SnapshotLike S>
void write_memory_timeline_file(const S& snap, int device, const std::string& path,
                                const CategoryRules* rules = nullptr);

/// torch.profiler's export_memory_timeline for the default allocator of `device`: its recorded
/// history (record_memory_history) by category, as JSON or HTML by the path's extension.
void export_memory_timeline(const std::string& path, const Device& device = Device());

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/reports/memory_timeline-inl.hpp"
#endif
