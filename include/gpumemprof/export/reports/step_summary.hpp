// Layer 5: a snapshot's training steps (analysis/steps.hpp) as text, JSON and an HTML table, for
// `gpumemprof summary` (text and --json) and the HTML report. Bytes are requested bytes held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/codec/html_escape.hpp"
#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The steps of every device whose trace has entries.
template <SnapshotLike S>
[[nodiscard]] std::vector<StepReport> snapshot_steps(const S& snap) {
  std::vector<StepReport> out;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (!snap.device_traces[d].empty()) out.push_back(analyze_steps(snap, static_cast<int>(d)));
  }
  return out;
}

namespace detail {

/// Where the steps came from, in words.
inline std::string step_source_text(const StepReport& r) {
  switch (r.source) {
    case StepSource::annotations: return "annotated ranges named as steps, numbered from 0";
    case StepSource::detected:
      return "detected: the allocation pattern repeats every " + std::to_string(r.period) +
             " allocations; numbered from 0";
    case StepSource::none: break;
  }
  return "no ranges named as steps (\"step N\", \"ProfilerStep#N\", \"train_step\", \"iteration N\") and no "
         "repeating allocation pattern";
}

/// A step's label in every table: its number (from 0, the number `slice --steps` takes), then the
/// annotation's name where that says more ("3  train_step"; "3" for "step 3" or a detected step).
inline std::string step_label(const StepReport& r, std::size_t k) {
  const std::string number = std::to_string(k);
  const std::string& name = r.steps[k].name;
  return name.empty() || name == "step " + number ? number : number + "  " + name;
}

/// The rows a table shows: all up to 20 steps, else the first and last 10 (SIZE_MAX marks the gap).
inline std::vector<std::size_t> shown_steps(std::size_t n) {
  std::vector<std::size_t> rows;
  for (std::size_t k = 0; k < n; ++k) {
    if (n <= 20 || k < 10 || k >= n - 10) {
      rows.push_back(k);
    } else if (k == 10) {
      rows.push_back(SIZE_MAX);
    }
  }
  return rows;
}

}  // namespace detail

/// The steps of one device as text, with the `top` largest growing sites.
[[nodiscard]] inline std::string format_steps(const StepReport& r, std::size_t top = 10) {
  std::string out = "steps, device " + std::to_string(r.device) + ": ";
  if (r.source == StepSource::none) return out + "none (" + detail::step_source_text(r) + ")\n";
  out += std::to_string(r.steps.size()) + " (" + detail::step_source_text(r) + "); requested bytes held:\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-24s %12s %12s %13s\n", "step", "peak", "at end", "growth");
  out += buf;
  for (const std::size_t k : detail::shown_steps(r.steps.size())) {
    if (k == SIZE_MAX) {
      out += "  ...\n";
      continue;
    }
    const StepFacts& s = r.steps[k];
    std::snprintf(buf, sizeof buf, "  %-24.24s %12s %12s %13s\n", detail::step_label(r, k).c_str(),
                  format_size(static_cast<std::uint64_t>(s.peak_bytes)).c_str(),
                  format_size(static_cast<std::uint64_t>(s.end_bytes)).c_str(),
                  format_size_change(s.growth_bytes).c_str());
    out += buf;
  }
  if (r.steps.size() < 2 || top == 0) return out;  // --top 0: no sites asked for, no heading
  if (r.growing_sites.empty()) return out + "no allocation site grows in every step after the first\n";
  out += "allocation sites that grow in every step after the first:\n";
  const auto later = static_cast<std::int64_t>(r.steps.size() - 1);
  for (std::size_t i = 0; i < r.growing_sites.size() && i < top; ++i) {
    const SiteGrowth& g = r.growing_sites[i];
    std::snprintf(buf, sizeof buf, "  %12s per step (%s over steps 1-%lld)  %s\n",
                  format_size_change(g.total / later).c_str(), format_size_change(g.total).c_str(),
                  static_cast<long long>(later), g.site.c_str());
    out += buf;
  }
  return out;
}

/// The steps of one device as one JSON (or pickle) dict.
inline void write_steps(ValueWriter& w, const StepReport& r) {
  w.begin_dict();
  w.field("device", static_cast<std::int64_t>(r.device));
  w.field("source", to_string(r.source));
  w.field("allocations_per_step", static_cast<std::uint64_t>(r.period));
  w.key("steps");
  w.begin_list();
  for (const StepFacts& s : r.steps) {
    w.begin_dict();
    w.field("name", s.name);
    w.field("start_us", s.start_us);
    w.field("end_us", s.end_us);
    w.field("entries", static_cast<std::uint64_t>(s.entries));
    w.field("start_requested_bytes", s.start_bytes);
    w.field("peak_requested_bytes", s.peak_bytes);
    w.field("end_requested_bytes", s.end_bytes);
    w.field("growth_bytes", s.growth_bytes);
    w.end_dict();
  }
  w.end_list();
  w.key("growing_sites");
  w.begin_list();
  for (const SiteGrowth& g : r.growing_sites) {
    w.begin_dict();
    w.field("site", g.site);
    w.key("growth_bytes_per_step");
    w.begin_list();
    for (const std::int64_t v : g.per_step) w.value(v);
    w.end_list();
    w.field("total_growth_bytes", g.total);
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
}

/// The steps of every traced device as the HTML report's card (a table per device, growing sites).
[[nodiscard]] inline std::string steps_html(const std::vector<StepReport>& reports) {
  std::string out = "<section class=\"card\" id=\"steps-card\"><div class=\"card-head\"><h2>Steps</h2></div>\n";
  for (const StepReport& r : reports) {
    out += "<p>Device " + std::to_string(r.device) + ": ";
    detail::append_html_escaped(out, r.source == StepSource::none ? "no steps: " + detail::step_source_text(r)
                                                          : std::to_string(r.steps.size()) + " steps (" +
                                                                detail::step_source_text(r) + "); requested bytes held");
    out += "</p>\n";
    if (r.source == StepSource::none) continue;
    out += "<table class=\"steps\"><tr><th>step</th><th>peak</th><th>at end</th><th>growth</th></tr>\n";
    for (const std::size_t k : detail::shown_steps(r.steps.size())) {
      if (k == SIZE_MAX) {
        out += "<tr><td colspan=\"4\">&hellip;</td></tr>\n";
        continue;
      }
      const StepFacts& s = r.steps[k];
      out += "<tr><td>";
      detail::append_html_escaped(out, detail::step_label(r, k));
      out += "</td><td>" + format_size(static_cast<std::uint64_t>(s.peak_bytes)) + "</td><td>" +
             format_size(static_cast<std::uint64_t>(s.end_bytes)) + "</td><td>" + format_size_change(s.growth_bytes) +
             "</td></tr>\n";
    }
    out += "</table>\n";
    if (r.growing_sites.empty()) continue;
    out += "<p>Allocation sites that grow in every step after the first:</p>\n<ul class=\"growing-sites\">\n";
    const auto later = static_cast<std::int64_t>(r.steps.size() - 1);
    for (const SiteGrowth& g : r.growing_sites) {
      out += "<li>" + format_size_change(g.total / later) + " per step: ";
      detail::append_html_escaped(out, g.site);
      out += "</li>\n";
    }
    out += "</ul>\n";
  }
  return out + "</section>";
}

GPUMEMPROF_NAMESPACE_END
