// The memory timeline's bodies (memory_timeline.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/reports.cpp, for Snapshot and
// CompactSnapshot) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/annotated_ranges.hpp"
#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/html_escape.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// torch.profiler's category order; column = index + 1; unknown (and user categories) = 8.
inline constexpr std::array<std::string_view, 7> kTorchCategories = {
    category::parameter,  category::optimizer_state, category::input,          category::temporary,
    category::activation, category::gradient,        category::autograd_detail};
inline constexpr std::size_t kTorchColumns = 9;

[[nodiscard]] inline std::size_t torch_column(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kTorchCategories.size(); ++i) {
    if (kTorchCategories[i] == name) return i + 1;
  }
  return kTorchColumns - 1;
}

/// Walks the category levels of `t`, coalesced as torch does: `row(time_us, bytes by category)`
/// once per run of alloc/free_requested entries and category changes sharing a microsecond (and
/// first for the bytes allocated before the trace, at the first such event's time, when there are any).
template <SnapshotLike S, class Row>
void walk_category_rows(const TraceTimeline<S>& t, Row&& row) {
  const auto& trace = t.trace();
  const auto& changes = t.changes();
  const auto counts = [](const auto& e) {
    return e.action == TraceAction::alloc || e.action == TraceAction::free_requested;
  };
  bool any = false;
  std::int64_t t_min = 0;
  for (const auto& e : trace) {
    if (!counts(e)) continue;
    t_min = any ? std::min(t_min, e.time_us) : e.time_us;
    any = true;
  }
  for (const CategoryChange& c : changes) {
    t_min = any ? std::min(t_min, c.time_us) : c.time_us;
    any = true;
  }
  if (!any) return;
  const auto& start = t.start_categories();
  if (std::any_of(start.begin(), start.end(), [](std::int64_t b) { return b != 0; })) row(t_min, start);
  // A row is due when the next counted entry has another time (or there is none).
  std::vector<std::size_t> next_counted(trace.size(), trace.size());
  for (std::size_t i = trace.size(), next = trace.size(); i-- > 0;) {
    next_counted[i] = next;
    if (counts(trace[i])) next = i;
  }
  // The next counted event after entry i (or after the changes placed before entry j): a change
  // placed before that entry comes first.
  std::size_t k = 0;  // changes passed
  const auto next_time = [&](std::size_t entry) -> std::optional<std::int64_t> {
    if (k < changes.size() && changes[k].trace_index <= entry) return changes[k].time_us;
    if (entry < trace.size()) return trace[entry].time_us;
    return std::nullopt;
  };
  t.walk(
      [&](std::size_t i, const auto& e, const TimelineLevels&, const std::vector<std::int64_t>& by_category) {
        if (!counts(e)) return;
        if (next_time(next_counted[i]) != e.time_us) row(e.time_us, by_category);
      },
      [&](const CategoryChange& c, const std::vector<std::int64_t>& by_category) {
        ++k;
        const std::size_t at = c.trace_index < trace.size() ? c.trace_index : trace.size();
        const std::size_t n = at < trace.size() && !counts(trace[at]) ? next_counted[at] : at;
        if (next_time(n) != c.time_us) row(c.time_us, by_category);
      });
}

}  // namespace detail

template <SnapshotLike S>
void write_memory_timeline_json(const S& snap, int device, std::ostream& out, const CategoryRules* rules) {
  const TraceTimeline<S> t(snap, device, rules);
  std::vector<std::size_t> column;
  for (const std::string& name : t.categories()) column.push_back(detail::torch_column(name));
  std::vector<std::int64_t> times;
  std::vector<std::array<std::int64_t, detail::kTorchColumns>> rows;
  detail::walk_category_rows(t, [&](std::int64_t time, const std::vector<std::int64_t>& by_category) {
    std::array<std::int64_t, detail::kTorchColumns> r{};
    for (std::size_t c = 0; c < by_category.size() && c < column.size(); ++c) r[column[c]] += by_category[c];
    times.push_back(time);
    rows.push_back(r);
  });
  JsonWriter w(out);
  w.begin_list();
  w.begin_list();
  for (const std::int64_t time : times) w.value(time);
  w.end_list();
  w.begin_list();
  for (const auto& r : rows) {
    w.begin_list();
    for (const std::int64_t b : r) w.value(b);
    w.end_list();
  }
  w.end_list();
  w.end_list();
  w.finish();
}

namespace detail {

/// A category's color: torch.profiler's seven and unknown always alike, user categories from a
/// palette in order of appearance (`user_index`).
[[nodiscard]] inline const char* category_color(std::string_view name, std::size_t user_index) {
  static constexpr const char* kTorch[] = {"#1b7f3b", "#c9a227", "#222222", "#8e6bbf",
                                           "#d6453d", "#2d5bd3", "#5b9bd5"};  // torch's order
  static constexpr const char* kUser[] = {"#e08a2e", "#2aa198", "#b5487a", "#6b8e23", "#8b5a2b", "#4b0082"};
  if (name.empty() || name == category::unknown) return "#9aa0a6";
  const std::size_t column = torch_column(name);
  if (column < kTorchColumns - 1) return kTorch[column - 1];
  return kUser[user_index % (sizeof kUser / sizeof *kUser)];
}

inline std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

/// The time axis's label `offset_us` after the first event, in the unit the whole `span_us`
/// reads best in, with the decimals that keep five evenly spaced ticks apart.
inline std::string time_tick(double offset_us, double span_us) {
  const double unit = span_us >= 1e6 ? 1e6 : span_us >= 1e3 ? 1e3 : 1.0;
  const double step = span_us / 4 / unit;
  const int decimals = step >= 10 ? 0 : step >= 1 ? 1 : step >= 0.1 ? 2 : 3;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, offset_us / unit, unit == 1e6 ? "s" : unit == 1e3 ? "ms" : "us");
  return buf;
}

}  // namespace detail

template <SnapshotLike S>
std::string memory_timeline_svg(const S& snap, int device, const CategoryRules* rules) {
  constexpr int kWidth = 1000, kPlotH = 320, kBandH = 16, kLeft = 70, kTop = 10;
  constexpr std::size_t kBuckets = 1000;  // at most one drawn state per horizontal pixel
  const TraceTimeline<S> t(snap, device, rules);
  const std::size_t n_cat = t.categories().size();
  // The rows, reduced on the fly to the state of highest total per pixel column (peaks survive).
  std::int64_t t0 = 0, t1 = 0;
  bool any = false;
  for (const auto& e : t.trace()) {
    if (e.action != TraceAction::alloc && e.action != TraceAction::free_requested) continue;
    t0 = any ? std::min(t0, e.time_us) : e.time_us;
    t1 = any ? std::max(t1, e.time_us) : e.time_us;
    any = true;
  }
  const double span = t1 > t0 ? static_cast<double>(t1 - t0) : 1.0;
  std::vector<std::int64_t> times;  // per kept row
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::int64_t> peaks(n_cat, 0);
  {
    std::size_t bucket = kBuckets;
    std::int64_t best = -1, last_time = t0;
    detail::walk_category_rows(t, [&](std::int64_t time, const std::vector<std::int64_t>& c) {
      last_time = std::max(last_time, time);  // drawn in order even if the clock stepped back
      std::int64_t total = 0;
      for (std::size_t k = 0; k < n_cat && k < c.size(); ++k) {
        peaks[k] = std::max(peaks[k], c[k]);
        total += std::max<std::int64_t>(c[k], 0);
      }
      const auto b = static_cast<std::size_t>(static_cast<double>(last_time - t0) / span * (kBuckets - 1));
      if (b != bucket) {
        times.push_back(last_time);
        rows.emplace_back();
        bucket = b;
        best = -1;
      }
      if (total > best) {
        rows.back().assign(c.begin(), c.end());
        rows.back().resize(n_cat, 0);
        best = total;
      }
    });
  }
  std::vector<const char*> colors;
  for (std::size_t k = 0, user = 0; k < n_cat; ++k) {
    const std::string& name = t.categories()[k];
    const bool is_user = !name.empty() && detail::torch_column(name) == detail::kTorchColumns - 1;
    colors.push_back(detail::category_color(name, is_user ? user++ : 0));
  }
  std::vector<std::size_t> keep(rows.size());
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = i;
  std::int64_t ymax = 1;
  for (const std::size_t i : keep) {
    std::int64_t total = 0;
    for (const std::int64_t v : rows[i]) total += std::max<std::int64_t>(v, 0);
    ymax = std::max(ymax, total);
  }
  const auto bands = annotated_ranges(snap.external_annotations, device);
  const int plot_w = kWidth - kLeft - 10;
  const int height = kTop + kPlotH + 30 + 2 * kBandH + 10;
  const auto x_of = [&](std::int64_t time) {
    return kLeft + std::clamp(static_cast<double>(time - t0) / span, 0.0, 1.0) * plot_w;
  };
  const auto y_of = [&](std::int64_t bytes) {
    return kTop + kPlotH - static_cast<double>(bytes) / static_cast<double>(ymax) * kPlotH;
  };

  std::string svg = "<svg class=\"gmp-timeline\" width=\"" +
                    std::to_string(kWidth) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                    std::to_string(kWidth) + " " + std::to_string(height) + "\" role=\"img\">";
  // Bands first, under the areas' axis: scopes on one row, steps on the other.
  for (const auto& b : bands) {
    const bool step = detail::names_a_step(b.name);
    const double x0 = x_of(b.t0), x1 = std::max(x_of(b.open() ? t1 : b.t1), x0 + 1);  // open: to the end
    const int y = kTop + kPlotH + 30 + (step ? kBandH : 0);
    svg += "<g class=\"band" + std::string(step ? " step" : "") + "\"><rect x=\"" + detail::fmt_num(x0) + "\" y=\"" +
           std::to_string(y) + "\" width=\"" + detail::fmt_num(x1 - x0) + "\" height=\"" + std::to_string(kBandH - 2) +
           "\" fill=\"" + (step ? "#f0c36d" : "#b9cbe8") + "\" stroke=\"#fff\"><title>";
    detail::append_html_escaped(svg, b.name);
    svg += "</title></rect>";
    if (x1 - x0 > 6.0 * static_cast<double>(b.name.size()) + 4) {  // the label only where it fits
      svg += "<text x=\"" + detail::fmt_num(x0 + 2) + "\" y=\"" + std::to_string(y + kBandH - 5) + "\" font-size=\"10\">";
      detail::append_html_escaped(svg, b.name);
      svg += "</text>";
    }
    svg += "</g>";
  }
  // One area per category, stacked in category order, as step lines (memory stays until the next row).
  std::vector<std::int64_t> below(keep.size(), 0);
  for (std::size_t k = 0; k < n_cat; ++k) {
    if (peaks[k] == 0 || keep.empty()) continue;
    std::string top, bottom;
    for (std::size_t j = 0; j < keep.size(); ++j) {
      const std::size_t i = keep[j];
      const double x = x_of(times[i]);
      const double xn = j + 1 < keep.size() ? x_of(times[keep[j + 1]]) : kLeft + plot_w;
      const std::int64_t lo = below[j], hi = lo + std::max<std::int64_t>(rows[i][k], 0);
      top += (j == 0 ? "M" : "L") + detail::fmt_num(x) + "," + detail::fmt_num(y_of(hi)) + "L" + detail::fmt_num(xn) +
             "," + detail::fmt_num(y_of(hi));
      bottom = "L" + detail::fmt_num(xn) + "," + detail::fmt_num(y_of(lo)) + "L" + detail::fmt_num(x) + "," +
               detail::fmt_num(y_of(lo)) + bottom;
      below[j] = hi;
    }
    const std::string& name = t.categories()[k].empty() ? std::string(category::unknown) : t.categories()[k];
    svg += "<path class=\"area\" data-category=\"";
    detail::append_html_escaped(svg, name);
    svg += "\" d=\"" + top + bottom + "Z\" fill=\"" + colors[k] + "\" fill-opacity=\"0.85\"><title>";
    detail::append_html_escaped(svg, name);
    svg += "</title></path>";
  }
  // Axes: bytes on the left, the time since the first event below.
  svg += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + std::to_string(kTop + kPlotH) + "\" x2=\"" +
         std::to_string(kLeft + plot_w) + "\" y2=\"" + std::to_string(kTop + kPlotH) + "\" stroke=\"#333\"/>";
  for (int g = 0; g <= 4; ++g) {
    const std::int64_t bytes = ymax * g / 4;
    svg += "<text x=\"" + std::to_string(kLeft - 4) + "\" y=\"" + detail::fmt_num(y_of(bytes) + 4) +
           "\" font-size=\"10\" text-anchor=\"end\">" + format_size(static_cast<std::uint64_t>(bytes)) + "</text>";
    const double offset = span * g / 4;
    svg += "<text x=\"" + detail::fmt_num(kLeft + offset / span * plot_w) + "\" y=\"" +
           std::to_string(kTop + kPlotH + 14) + "\" font-size=\"10\" text-anchor=\"" +
           (g == 4   ? "end"
            : g == 0 ? "start"
                     : "middle") +
           "\">" + detail::time_tick(offset, span) + "</text>";
  }
  svg += "</svg>";

  std::string legend = "<table class=\"gmp-legend\"><tr><th>category</th><th>peak (requested bytes in use)</th></tr>";
  for (std::size_t k = 0; k < n_cat; ++k) {
    if (peaks[k] == 0) continue;
    const std::string& name = t.categories()[k].empty() ? std::string(category::unknown) : t.categories()[k];
    legend += "<tr><td><span style=\"display:inline-block;width:10px;height:10px;background:" + std::string(colors[k]) +
              "\"></span> ";
    detail::append_html_escaped(legend, name);
    legend += "</td><td>" + format_size(static_cast<std::uint64_t>(peaks[k])) + "</td></tr>";
  }
  legend += "</table>";
  if (rows.empty()) return "<p>No allocations in this device's trace.</p>";
  return svg + legend;
}

template <SnapshotLike S>
void write_memory_timeline_html(const S& snap, int device, std::ostream& out, std::string_view title,
                                const CategoryRules* rules) {
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>";
  detail::append_html_escaped(page, title);
  page += "</title><style>body{font:14px system-ui,sans-serif;margin:16px}table{border-collapse:collapse;margin-top:8px}"
          "td,th{padding:2px 10px;text-align:left}</style></head><body><h1>";
  detail::append_html_escaped(page, title);
  page += "</h1><p>Requested bytes in use (alloc to free requested) of device " + std::to_string(device) +
          " by category; bands: annotated ranges, steps below.</p>";
  page += memory_timeline_svg(snap, device, rules);
  page += "</body></html>\n";
  out << page;
  out.flush();
  if (!out) throw IoError("writing the memory timeline failed");
}

template <SnapshotLike S>
void write_memory_timeline_file(const S& snap, int device, const std::string& path, const CategoryRules* rules) {
  const auto ends = [&path](std::string_view suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".json")) {
    write_file_atomically(path, [&](std::ostream& os) { write_memory_timeline_json(snap, device, os, rules); });
  } else if (ends(".html") || ends(".htm")) {
    write_file_atomically(path, [&](std::ostream& os) { write_memory_timeline_html(snap, device, os, "Memory timeline", rules); });
  } else {
    throw ConfigError("memory timeline '" + path + "': name a .json file (torch.profiler's layout) or a .html page");
  }
}

GPUMEMPROF_FUNC void export_memory_timeline(const std::string& path, const Device& device) {
  const Device d(device);
  const Snapshot snap = snapshot(d);
  write_memory_timeline_file(snap, d.index(), path);
}

GPUMEMPROF_NAMESPACE_END
