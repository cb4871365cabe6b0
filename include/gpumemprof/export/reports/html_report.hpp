// Layer 5: the offline HTML report -- one self-contained page (no network, no external script)
// showing a snapshot: summary numbers, the active-memory timeline stacked by allocation (with
// level of detail, so million-entry traces stay responsive), the peak and what was live at it,
// the top allocation sites and the segments with their blocks; for our snapshots also the whole
// device (html_device_bar.hpp).
//
// The C++ side does the heavy work once (html_report_model.hpp: intervals, interned stacks,
// peaks) and embeds it as compact columnar JSON (number arrays, delta-coded where values grow,
// plus one string table, written by the one JsonWriter in its script-safe mode); the page's
// script (web/report-*.js, embedded by html_report_assets.hpp) only decodes and draws.
//
//   gmp::write_html_report(gmp::snapshot(), "report.html", {.title = "train step 42"});
//
// Declarations only; the bodies are in html_report-inl.hpp (the compiled library has them for
// Snapshot and CompactSnapshot under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct HtmlReportOptions {
  /// Shown as the page's title and heading.
  std::string title = "GPU memory report";
  /// Keep only the newest N entries of each device's trace (0 = all). Bounds the file size
  /// (about 15 bytes per entry) for very long histories.
  std::size_t max_trace_entries = 0;
  /// Level of detail (html_report_lod.hpp): a device whose trace has more states than this is
  /// shown at this many (the most active state of each run of states; 0 = all states) ...
  std::size_t max_page_states = std::size_t{1} << 18;
  /// ... and with at most this many allocations drawn one by one (0 = all): those live at the
  /// peak, then those covering the most bytes x time; the rest are summed. Together they keep a 10M-entry report near
  /// 10 MB and quick to open.
  std::size_t max_page_allocations = 200000;
};

/// Writes the report as one HTML document (UTF-8) to `os`, streaming: the page's data goes out
/// as it is encoded. Works offline: the page holds its data, styles and script. Handles
/// snapshots without traces (segments only) and traces without frames.
template <SnapshotLike S>
void write_html_report(const S& snapshot, std::ostream& os, const HtmlReportOptions& options = {});

/// The report as one HTML document (UTF-8), in memory.
template <SnapshotLike S>
[[nodiscard]] std::string render_html_report(const S& snapshot, const HtmlReportOptions& options = {});

/// Renders the report into `path` atomically (temp file + rename). Throws IoError (naming the
/// path and the reason) when it cannot be written; an old file is then left intact.
template <SnapshotLike S>
void write_html_report(const S& snapshot, const std::string& path, const HtmlReportOptions& options = {});

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/reports/html_report-inl.hpp"
#endif
