// `gpumemprof slice SNAPSHOT (--time T0:T1 | --max-entries N) -o OUT.pickle`: a window of a
// snapshot's history as a smaller snapshot that PyTorch's viewer opens (history/snapshot_slice.hpp
// says what the segments and blocks of a slice are).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/history/snapshot_slice.hpp"

namespace gpumemprof::tools {

/// One end of --time ("" = open), in microseconds as the trace's time_us.
inline std::int64_t time_bound(const std::string& text, std::int64_t open, const std::string& whole) {
  if (text.empty()) return open;
  const bool negative = text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError("--time '" + whole +
                     "': give T0:T1 in microseconds as the trace's time_us (either end may be "
                     "left open: T0: or :T1)");
  }
  const std::int64_t v = std::stoll(digits);
  return negative ? -v : v;
}

/// --steps A:B: the training steps as summary and html count them (analysis/steps.hpp: annotated
/// ranges named as steps, else the repeating allocation pattern), numbered from 0; each device
/// with steps keeps the entries of steps A to B (by the recorder's order, exact when entries of
/// one microsecond span a step's edge), the others the time span of those steps.
template <SnapshotLike S>
void steps_window(const std::string& spec, const S& snap, const std::string& path, SliceWindow& w) {
  std::vector<StepReport> reports;
  std::size_t count = 0;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    reports.push_back(analyze_steps(snap, static_cast<int>(d)));
    count = std::max(count, reports.back().steps.size());
  }
  if (count == 0) {
    throw UsageError(path +
                     ": no steps found (no ranges named \"step N\", \"ProfilerStep#N\", \"train_step\" or "
                     "\"iteration N\", and no repeating allocation pattern); use --time T0:T1 instead");
  }
  const auto colon = spec.find(':');
  const std::string last = std::to_string(count - 1);
  const auto step_index = [&](const std::string& text, std::size_t open) {
    if (text.empty()) return open;
    if (text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos || std::stoull(text) >= count) {
      throw UsageError("--steps '" + spec + "': the snapshot has steps 0 to " + last + "; give A:B, A: or :B");
    }
    return static_cast<std::size_t>(std::stoull(text));
  };
  if (colon == std::string::npos)
    throw UsageError("--steps '" + spec + "': give A:B, A: or :B (steps 0 to " + last + ")");
  const std::size_t a = step_index(spec.substr(0, colon), 0);
  const std::size_t b = step_index(spec.substr(colon + 1), count - 1);
  if (a > b) throw UsageError("--steps '" + spec + "': the first step is after the last");
  w.t0 = std::numeric_limits<std::int64_t>::max();
  w.t1 = std::numeric_limits<std::int64_t>::min();
  for (std::size_t d = 0; d < reports.size(); ++d) {
    const std::vector<StepFacts>& steps = reports[d].steps;
    if (a >= steps.size()) continue;
    const StepFacts& from = steps[a];
    const StepFacts& to = steps[std::min(b, steps.size() - 1)];
    // An open end keeps everything before the first step or after the last.
    const bool from_start = colon == 0;
    const bool to_end = colon + 1 == spec.size();
    w.entries[static_cast<int>(d)] = {from_start ? 0 : from.first_entry,
                                      to_end ? snap.device_traces[d].size() : to.end_entry};
    w.t0 = std::min(w.t0, from_start ? std::numeric_limits<std::int64_t>::min() : from.start_us);
    w.t1 = std::max(w.t1, to_end ? std::numeric_limits<std::int64_t>::max() : to.end_us);
  }
}

/// The window --time and --max-entries ask for; checked against the snapshot's time span.
template <SnapshotLike S>
SliceWindow slice_window(const Args& args, const S& snap, const std::string& path) {
  SliceWindow w;
  w.max_entries = args.count("--max-entries", 0);
  if (args.has("--max-entries") && w.max_entries == 0) throw UsageError("--max-entries takes a count of 1 or more");
  if (args.has("--time") && args.has("--steps")) throw UsageError("give --time or --steps, not both");
  if (!args.has("--time") && !args.has("--steps")) return w;
  if (args.has("--steps")) {
    steps_window(args.get("--steps"), snap, path, w);
    return w;
  }
  const std::string t = args.get("--time");
  const auto colon = t.find(':');
  if (colon == std::string::npos) throw UsageError("--time '" + t + "': give T0:T1, T0: or :T1 (microseconds)");
  w.t0 = time_bound(t.substr(0, colon), std::numeric_limits<std::int64_t>::min(), t);
  w.t1 = time_bound(t.substr(colon + 1), std::numeric_limits<std::int64_t>::max(), t);
  if (w.t0 > w.t1) throw UsageError("--time '" + t + "': the start is after the end");
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  for (const auto& trace : snap.device_traces) {
    if (trace.empty()) continue;
    first = std::min(first, trace.front().time_us);
    last = std::max(last, trace.back().time_us);
  }
  if (first > last) throw UsageError(path + ": the snapshot has no trace entries to slice");
  if (w.t0 > last || w.t1 < first) {
    throw UsageError("--time '" + t + "' lies outside the snapshot's trace, which spans " + std::to_string(first) +
                     ":" + std::to_string(last) + " (time_us)");
  }
  return w;
}

inline int cmd_slice(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--output", "--time", "--steps", "--max-entries"}, {{"-o", "--output"}});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof slice SNAPSHOT (--time T0:T1 | --steps A:B | --max-entries N) -o OUT.pickle\n"
        "  A smaller snapshot that PyTorch's memory viewer opens: the trace entries inside the window,\n"
        "  and the segments and blocks as they were at its end (blocks live when the window begins\n"
        "  show as allocated before it).\n"
        "  --time T0:T1       entries with T0 <= time_us <= T1 (microseconds, as in the trace); T0: and\n"
        "                     :T1 leave an end open\n"
        "  --steps A:B        steps A to B, numbered from 0 as summary and html number them (ranges named\n"
        "                     \"step N\", \"ProfilerStep#N\", \"train_step\" or \"iteration N\", else the\n"
        "                     repeating allocation pattern); A: and :B leave an end open\n"
        "  --max-entries N    the newest N entries of each device's trace (with --time: of the window)\n"
        "  -o OUT             .pickle (the viewer's format) or .json; never the input file\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file");
  if (!args.has("--time") && !args.has("--steps") && !args.has("--max-entries")) {
    throw UsageError("say which part to keep: --time T0:T1, --steps A:B or --max-entries N");
  }
  const std::string in = args.positional()[0];
  const std::string out = args.output_file("--output", {in});
  if (out.empty()) throw UsageError("name the output with -o OUT.pickle");
  const CompactSnapshot snap = load_cli_snapshot(in);
  const SliceWindow w = slice_window(args, snap, in);
  const SliceResult r = slice_snapshot(snap, w);
  write_snapshot_file(r.snapshot, out);
  std::printf("%s: %zu trace %s, %zu %s at the end of the window\n", out.c_str(), r.entries,
              r.entries == 1 ? "entry" : "entries", r.snapshot.segments.size(),
              plural(r.snapshot.segments.size(), "segment").c_str());
  if (r.approximate != 0) {
    std::printf(
        "  %zu of the %zu later entries could not be undone exactly (expandable segments or unknown "
        "addresses): the blocks at the window's end are approximate\n",
        r.approximate, r.undone);
  }
  return 0;
}

}  // namespace gpumemprof::tools
