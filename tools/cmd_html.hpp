// `gpumemprof html SNAPSHOT -o report.html` (export/reports/html_report.hpp: one snapshot's page)
// and `gpumemprof html DIR -o report.html` / `html A B ... -o report.html` (html_ranks_report.hpp:
// every rank on one axis, a click opens a rank's full view).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_ranks.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/export/reports/html_ranks_report.hpp"
#include "gpumemprof/export/reports/html_report.hpp"

namespace gpumemprof::tools {

/// The cross-rank page of `positional` (a folder of rank files, or several snapshots) into `out`.
inline int write_ranks_page(const Args& args, const std::string& out, const HtmlReportOptions& page) {
  const std::vector<std::string>& positional = args.positional();
  HtmlRanksOptions opt;
  opt.title = args.get("--title", opt.title);
  opt.max_points = args.count("--points", opt.max_points, 1000000);
  opt.drill_ranks = args.count("--drill-ranks", opt.drill_ranks);
  opt.rank_page.max_trace_entries = page.max_trace_entries;
  opt.rank_page.max_page_states = args.count("--page-states", opt.rank_page.max_page_states);
  opt.rank_page.max_page_allocations = args.count("--page-allocations", opt.rank_page.max_page_allocations);
  const HtmlRanksModel model = build_html_ranks_model(positional, opt);
  const std::string label = positional.size() == 1 ? positional[0] : std::to_string(positional.size()) + " files";
  announce_worst_rank(label, model.report, "html");
  write_html_ranks_report(model, out, opt);
  std::string drilled;
  for (const int r : model.drill) drilled += (drilled.empty() ? "" : ", ") + std::to_string(r);
  std::printf("wrote %s: %zu rank(s) aligned by %s; full views embedded for rank(s) %s\n", out.c_str(),
              model.report.ranks().size(), model.by_steps ? "steps" : "time", drilled.c_str());
  return 0;
}

inline int cmd_html(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"},
                  {"--output", "--title", "--max-entries", "--page-states", "--page-allocations", "--points",
                   "--drill-ranks"},
                  {{"-o", "--output"}});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof html SNAPSHOT -o REPORT.html [--title T] [--max-entries N]\n"
        "                       [--page-states N] [--page-allocations N]\n"
        "       gpumemprof html DIR | SNAPSHOT SNAPSHOT... -o REPORT.html [--title T] [--points N]\n"
        "                       [--drill-ranks N] [--max-entries N] [--page-states N] [--page-allocations N]\n"
        "  Writes one self-contained HTML page (no network needed): memory timeline, peak,\n"
        "  segments and fragmentation, top allocation sites. --max-entries keeps the newest N\n"
        "  trace entries per device. Level of detail, so long traces open fast: past\n"
        "  --page-states (default 262144) the timeline shows the most active state of each run\n"
        "  of events, past --page-allocations (default 200000) the others are summed; peaks and\n"
        "  per-site figures stay exact (0 = no limit).\n"
        "  Across ranks (a folder of rank-<R>.pickle files, or several snapshots): every rank's memory\n"
        "  on one axis -- aligned by steps when every rank has them (annotated \"step N\" ranges or the\n"
        "  repeating allocation pattern), else by time -- at most --points points per rank (default\n"
        "  2000, each the most of its stretch of time), the imbalance, a table of the ranks (the\n"
        "  numbers of 'summary DIR'), and a click that opens a rank's full view: embedded for the\n"
        "  --drill-ranks ranks with the largest peak allocated and the smallest (default 8, 0 = all),\n"
        "  each at --page-states 16384 and --page-allocations 20000 unless given. A missing,\n"
        "  duplicate or unreadable rank file is named on stderr; the others are still shown.\n",
        stdout);
    return 0;
  }
  if (!args.has("--output")) throw UsageError("name the report file with -o REPORT.html");
  if (args.positional().empty()) throw UsageError("name one SNAPSHOT file, a rank folder, or several snapshots");
  HtmlReportOptions opt;
  opt.title = args.get("--title", opt.title);
  opt.max_trace_entries = args.count("--max-entries", 0);
  // A rank folder's files are inputs too: the report must not replace one of them.
  const std::string out = args.output_file("--output", input_files(args.positional()));
  if (names_ranks(args.positional())) return write_ranks_page(args, out, opt);
  opt.max_page_states = args.count("--page-states", opt.max_page_states);
  opt.max_page_allocations = args.count("--page-allocations", opt.max_page_allocations);
  write_html_report(load_cli_snapshot(args.positional()[0]), out, opt);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace gpumemprof::tools
