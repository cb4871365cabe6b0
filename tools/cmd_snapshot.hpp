// `gpumemprof summary SNAPSHOT` and `gpumemprof html SNAPSHOT -o report.html`: read a snapshot
// (ours or PyTorch's pickle, or our JSON) and explain it as text or as an offline HTML page.
#pragma once

#include <cstdio>
#include <string>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"

namespace gpumemprof::tools {

inline int cmd_summary(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--top"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof summary SNAPSHOT [--top N]\n"
        "  Segments, fragmentation, the trace's events, the top allocation sites and the run's peak of a\n"
        "  snapshot (ours or PyTorch's .pickle, or our .json).\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file");
  const std::string& path = args.positional()[0];
  const CompactSnapshot snap = load_cli_snapshot(path);
  std::printf("snapshot %s\n%s%s", path.c_str(), format_summary(summarize(snap), args.count("--top", 10)).c_str(),
              format_replayed_peaks(snap).c_str());
  return 0;
}

inline int cmd_html(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"},
                  {"--output", "--title", "--max-entries", "--page-states", "--page-allocations"},
                  {{"-o", "--output"}});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof html SNAPSHOT -o REPORT.html [--title T] [--max-entries N]\n"
        "                       [--page-states N] [--page-allocations N]\n"
        "  Writes one self-contained HTML page (no network needed): memory timeline, peak,\n"
        "  segments and fragmentation, top allocation sites. --max-entries keeps the newest N\n"
        "  trace entries per device. Level of detail, so long traces open fast: past\n"
        "  --page-states (default 262144) the timeline shows the most active state of each run\n"
        "  of events, past --page-allocations (default 200000) the others are summed; peaks and\n"
        "  per-site figures stay exact (0 = no limit).\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file");
  if (!args.has("--output")) throw UsageError("name the report file with -o REPORT.html");
  const std::string out = args.output_file("--output", args.positional());
  const CompactSnapshot snap = load_cli_snapshot(args.positional()[0]);
  HtmlReportOptions opt;
  opt.title = args.get("--title", opt.title);
  opt.max_trace_entries = args.count("--max-entries", 0);
  opt.max_page_states = args.count("--page-states", opt.max_page_states);
  opt.max_page_allocations = args.count("--page-allocations", opt.max_page_allocations);
  write_html_report(snap, out, opt);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

inline int cmd_perfetto(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--output"}, {{"-o", "--output"}});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof perfetto SNAPSHOT -o TRACE.json\n"
        "  Chrome/Perfetto trace-event JSON: allocated and reserved bytes as counter tracks,\n"
        "  annotations as slices, OOMs as instants. Open it at ui.perfetto.dev.\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file");
  if (!args.has("--output")) throw UsageError("name the trace file with -o TRACE.json");
  const std::string out = args.output_file("--output", args.positional());
  write_perfetto_file(load_cli_snapshot(args.positional()[0]), out);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace gpumemprof::tools
