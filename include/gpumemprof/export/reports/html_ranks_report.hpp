// Layer 5: the offline HTML page across the ranks of a multi-process run (`gpumemprof html DIR`):
// every rank's memory on one shared axis, a table of the ranks, and a click that opens a rank's
// full view (the single-snapshot report, html_report.hpp) inside the page.
//
// Reading streams: every rank file is read once (rank_summary.hpp's load_cross_rank, which holds
// one snapshot per reading thread) and reduced to its RankFacts (the table and the imbalance: the
// same numbers as `summary DIR --json`, from the same functions) and its RankTimeline
// (analysis/rank_timeline.hpp: at most max_points points per rank, each a time bucket's highest
// requested and reserved bytes, and its steps). Then the ranks whose full view is embedded are
// read again, one at a time, while the page is written.
//
// The shared axis: when every rank with a trace has steps (annotated ranges named as steps, or
// the repeating allocation pattern), ranks are aligned by steps -- step k starts at x = k on
// every rank (StepAxis) -- else by time (seconds from the earliest first entry of any rank).
//
// Size: the overview is about 30 bytes per point (64 ranks x 2000 points: ~4 MB). The full views
// embedded are those of the drill_ranks ranks with the largest peak allocated bytes (the smallest
// rank's is kept in their place when it would be left out), each with the level of detail of
// rank_page (by default at most 16384 states and 20000 allocations drawn one by one: about 1-2 MB
// a rank); 0 embeds every rank's. The other ranks' rows say how to open their page.
//
// Data: {"v", "generator", "title", "align": "steps"|"time", "alignNote", "worldSize", "maxRank",
// "minRank", "imbalance" (null: the smallest allocated nothing), "imbalanceSite", "problems",
// "ranks": [{"rank", "facts" (the rank's entry of `summary DIR --json`, rank_summary.hpp),
// "peakRequestedInUse", "stepsFrom", "steps": {"name", "x0", "x1", "us"}, "x", "requestedInUse", "reserved",
// "page"}]}; each embedded view is a JSON string in <script type="application/json" id="gmp-rank-page-R">.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/analysis/cross_rank.hpp"
#include "gpumemprof/analysis/rank_timeline.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/atomic_file.hpp"
#include "gpumemprof/export/formats/html_escape.hpp"
#include "gpumemprof/export/formats/json_writer.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/value_columns.hpp"
#include "gpumemprof/export/reports/html_ranks_assets.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct HtmlRanksOptions {
  /// Shown as the page's title and heading.
  std::string title = "GPU memory across ranks";
  /// Points per rank on the shared axis (each a time bucket's highest levels).
  std::size_t max_points = 2000;
  /// Ranks whose full view is embedded, largest peak allocated first (0 = every rank).
  std::size_t drill_ranks = 8;
  /// Each embedded view's options (its title is set per rank).
  HtmlReportOptions rank_page{.max_page_states = 16384, .max_page_allocations = 20000};
  /// Reading threads (0: one per core, at most 4).
  unsigned jobs = 0;
};

/// What the page shows, read from every rank file once.
struct HtmlRanksModel {
  CrossRankReport report;
  std::vector<RankTimeline> timelines;  ///< parallel to report.ranks()
  bool by_steps = false;                ///< the shared axis counts steps (else seconds)
  std::string alignment;                ///< how the ranks are aligned, in a sentence
  std::int64_t t0_us = 0;               ///< time axis: the earliest first entry
  std::vector<int> drill;               ///< ranks whose full view is embedded
};

namespace detail {

/// Ranks listed as "0, 2, 5" (at most 8, then "and N more").
inline std::string list_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += " and " + std::to_string(ranks.size() - 8) + " more";
  return out;
}

/// Chooses the axis and the embedded views (see the file comment).
inline void plan_html_ranks(HtmlRanksModel& m, std::size_t drill_ranks) {
  const std::vector<RankFacts>& ranks = m.report.ranks();
  std::vector<int> no_steps, annotated, detected;
  bool any_trace = false;
  m.t0_us = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RankTimeline& t = m.timelines[i];
    if (!t.has_trace()) continue;
    any_trace = true;
    m.t0_us = std::min(m.t0_us, t.first_us);
    (t.steps.empty() ? no_steps : t.steps_from == StepSource::annotations ? annotated : detected)
        .push_back(ranks[i].rank);
  }
  if (!any_trace) m.t0_us = 0;
  m.by_steps = any_trace && no_steps.empty();
  if (!any_trace) {
    m.alignment = "No rank recorded a trace (record the memory history to see memory over time).";
  } else if (m.by_steps) {
    m.alignment = "Aligned by steps: step k starts at the same x on every rank, and each step is stretched to one unit.";
    if (!annotated.empty()) m.alignment += " Steps from annotated ranges on rank(s) " + list_ranks(annotated) + ".";
    if (!detected.empty())
      m.alignment += " Steps from the repeating allocation pattern on rank(s) " + list_ranks(detected) + ".";
  } else {
    m.alignment = "Aligned by time (seconds from the first recorded event of any rank; clocks of different hosts may "
                  "differ): no steps found on rank(s) " + list_ranks(no_steps) +
                  " (annotate them as \"step N\" to align by steps).";
  }
  std::vector<const RankFacts*> order;
  for (const RankFacts& r : ranks) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](const RankFacts* a, const RankFacts* b) {
    return a->peak_allocated_bytes > b->peak_allocated_bytes;
  });
  const std::size_t n = drill_ranks == 0 ? order.size() : std::min(drill_ranks, order.size());
  for (std::size_t i = 0; i < n; ++i) m.drill.push_back(order[i]->rank);
  const int smallest = m.report.min_peak_rank();
  if (n != 0 && n < order.size() && std::find(m.drill.begin(), m.drill.end(), smallest) == m.drill.end())
    m.drill.back() = smallest;
  std::sort(m.drill.begin(), m.drill.end());
}

/// x rounded to what a page can show (1e-6 of a unit keeps µs in seconds and steps of a second).
inline double page_x(double x) { return std::round(x * 1e6) / 1e6; }

inline void write_html_rank_json(JsonWriter& w, const HtmlRanksModel& m, const RankFacts& r, const RankTimeline& t) {
  w.begin_dict();
  w.field("rank", r.rank);
  w.key("facts");
  write_rank_facts_json(w, r);  // the rank's entry of `summary DIR --json`
  w.field("peakRequestedInUse", t.peaks.requested_in_use);
  w.field("stepsFrom", to_string(t.steps_from));
  const StepAxis axis(t.steps);
  const auto x_of = [&](std::int64_t t_us) {
    return page_x(m.by_steps ? axis(t_us) : static_cast<double>(t_us - m.t0_us) / 1e6);
  };
  w.key("steps");
  w.begin_dict();
  write_column(w, "name", t.steps, [](const StepFacts& s) { return s.name; });
  std::vector<double> x0, x1;
  for (std::size_t k = 0; k < t.steps.size(); ++k) {
    x0.push_back(m.by_steps ? static_cast<double>(k) : x_of(t.steps[k].start_us));
    x1.push_back(m.by_steps ? page_x(axis.step_end(t.steps, k)) : x_of(std::max(t.steps[k].start_us, t.steps[k].end_us)));
  }
  write_column(w, "x0", x0, [](double v) { return v; });
  write_column(w, "x1", x1, [](double v) { return v; });
  write_column(w, "us", t.steps, [](const StepFacts& s) { return std::max<std::int64_t>(0, s.end_us - s.start_us); });
  w.end_dict();
  write_column(w, "x", t.points, [&](const RankTimelinePoint& p) { return x_of(p.time_us); });
  write_column(w, "requestedInUse", t.points, [](const RankTimelinePoint& p) { return p.requested_in_use; });
  write_column(w, "reserved", t.points, [](const RankTimelinePoint& p) { return p.reserved; });
  w.field("page", std::find(m.drill.begin(), m.drill.end(), r.rank) != m.drill.end());
  w.end_dict();
}

inline void write_html_ranks_json(JsonWriter& w, const HtmlRanksModel& m, const HtmlRanksOptions& opt) {
  const CrossRankReport& rep = m.report;
  w.begin_dict();
  w.field("v", 1);
  w.field("generator", "gpumemprof " GPUMEMPROF_VERSION_STRING);
  w.field("title", opt.title);
  w.field("align", m.by_steps ? "steps" : "time");
  w.field("alignNote", m.alignment);
  w.field("worldSize", rep.world_size());
  w.field("maxRank", rep.max_peak_rank());
  w.field("minRank", rep.min_peak_rank());
  w.key("imbalance");
  if (rep.ranks().empty() || std::isinf(rep.imbalance())) {
    w.value(nullptr);
  } else {
    w.value(rep.imbalance());
  }
  w.field("imbalanceSite", rep.imbalance_site());
  write_column(w, "problems", rep.problems(), [](const std::string& p) { return p; });
  w.key("ranks");
  w.begin_list();
  for (std::size_t i = 0; i < rep.ranks().size(); ++i) write_html_rank_json(w, m, rep.ranks()[i], m.timelines[i]);
  w.end_list();
  w.end_dict();
}

}  // namespace detail

/// Reads every rank file of `positional` (folders of rank-<R>.pickle files, or snapshot files)
/// once, as the file comment says. Unreadable files are the report's problems.
[[nodiscard]] inline HtmlRanksModel build_html_ranks_model(const std::vector<std::string>& positional,
                                                          const HtmlRanksOptions& opt = {}) {
  std::mutex mutex;
  std::map<std::string, RankTimeline> by_file;
  HtmlRanksModel m;
  m.report = load_cross_rank(positional, 20, opt.jobs, [&](const CompactSnapshot& snap, const RankFacts& facts) {
    RankTimeline t = rank_timeline(snap, opt.max_points);
    const std::lock_guard<std::mutex> lock(mutex);
    by_file[facts.file] = std::move(t);
  });
  for (const RankFacts& r : m.report.ranks()) m.timelines.push_back(std::move(by_file[r.file]));
  detail::plan_html_ranks(m, opt.drill_ranks);
  return m;
}

/// Writes the page to `os`, streaming; reads the embedded ranks' files again, one at a time.
inline void write_html_ranks_report(const HtmlRanksModel& m, std::ostream& os, const HtmlRanksOptions& opt = {}) {
  std::string head;
  for (const std::string_view piece : detail::html_ranks_assets::kHead) head += piece;
  detail::append_html_escaped(head, opt.title);
  for (const std::string_view piece : detail::html_ranks_assets::kBeforeData) head += piece;
  detail::write_bytes(os, head.data(), head.size());
  {
    JsonWriter w(os, JsonWriterOptions{.script_safe = true});
    detail::write_html_ranks_json(w, m, opt);
    w.finish();
  }
  for (const int rank : m.drill) {
    const RankFacts& r = m.report.rank(rank);
    HtmlReportOptions page = opt.rank_page;
    page.title = "rank " + std::to_string(r.rank) + (r.host.empty() ? "" : " on " + r.host) +
                 (r.device.empty() ? "" : " (" + r.device + ")") + ": " + r.file;
    const std::string html = render_html_report(load_compact_snapshot(r.file), page);
    os << "</script>\n<script type=\"application/json\" id=\"gmp-rank-page-" << rank << "\">";
    JsonWriter w(os, JsonWriterOptions{.script_safe = true});
    w.value(std::string_view(html));
    w.finish();
  }
  for (const std::string_view piece : detail::html_ranks_assets::kAfterData) os << piece;
  os.flush();
  if (!os) throw IoError("writing the HTML report failed");
}

/// Renders the page into `path` atomically (temp file + rename); an old file is left intact on failure.
inline void write_html_ranks_report(const HtmlRanksModel& m, const std::string& path, const HtmlRanksOptions& opt = {}) {
  write_file_atomically(path, [&](std::ostream& os) { write_html_ranks_report(m, os, opt); });
}

GPUMEMPROF_NAMESPACE_END
