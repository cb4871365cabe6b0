// `gpumemprof summary SNAPSHOT` and `gpumemprof perfetto SNAPSHOT -o trace.json`: read a snapshot
// (ours or PyTorch's pickle, or our JSON) and explain it as text or as counter tracks.
#pragma once

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "cli_args.hpp"
#include "cmd_ranks.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"
#include "gpumemprof/export/reports/step_summary.hpp"

namespace gpumemprof::tools {

/// The requested and reserved peaks of each traced device, from the timeline every report reads.
inline std::string format_timeline_peaks(const CompactSnapshot& snap) {
  std::string out;
  for (const int d : traced_devices(snap)) {
    const TimelineLevels p = TraceTimeline<CompactSnapshot>(snap, d).peaks();
    out += "peak requested, device " + std::to_string(d) + ": " + format_size(static_cast<std::uint64_t>(p.requested)) +
           " = " + std::to_string(p.requested) + " bytes; peak reserved: " +
           format_size(static_cast<std::uint64_t>(p.reserved)) + " = " + std::to_string(p.reserved) + " bytes\n";
  }
  return out;
}

/// `gpumemprof summary SNAPSHOT --json`: the peaks and the steps of each traced device.
inline void print_summary_json(const std::string& path, const CompactSnapshot& snap) {
  JsonWriter w(std::cout);
  w.begin_dict();
  w.field("snapshot", path);
  w.key("devices");
  w.begin_list();
  for (const int d : traced_devices(snap)) {
    const TimelineLevels p = TraceTimeline<CompactSnapshot>(snap, d).peaks();
    w.begin_dict();
    w.field("device", static_cast<std::int64_t>(d));
    w.key("peak_allocated_bytes");  // block bytes, as the trace recorded them
    if (const std::optional<std::uint64_t> a = snapshot_peak_allocated(snap, d)) {
      w.value(*a);
    } else {
      w.value(nullptr);
    }
    w.field("peak_requested_bytes", p.requested);
    w.field("peak_reserved_bytes", p.reserved);
    w.end_dict();
  }
  w.end_list();
  w.key("steps");
  w.begin_list();
  for (const StepReport& r : snapshot_steps(snap)) write_steps(w, r);
  w.end_list();
  w.end_dict();
  w.finish();
  std::cout << '\n';
}

inline int cmd_summary(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help", "--json"}, {"--top"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof summary SNAPSHOT [--json] [--top N]\n"
        "       gpumemprof summary DIR | SNAPSHOT SNAPSHOT... [--json] [--top N]\n"
        "  Segments, fragmentation, the trace's events, the top allocation sites and the run's peak of a\n"
        "  snapshot (ours or PyTorch's .pickle, or our .json); for our snapshots also the whole device:\n"
        "  used memory beside the allocator's, external allocations by owner, context, unattributed.\n"
        "  Training steps -- annotated ranges named \"step N\", \"ProfilerStep#N\", \"train_step\" or\n"
        "  \"iteration N\", else the repeating allocation pattern -- with each step's peak, bytes held at\n"
        "  its end and growth, and the allocation sites that grow in every step (--json: as JSON).\n"
        "  Across ranks (a folder of rank-<R>.pickle files, or several snapshots): a row per rank (host,\n"
        "  device, peak allocated and reserved, fragmentation, OOMs, top site), the imbalance and the sites\n"
        "  whose peak differs across ranks; --json prints it as one JSON object. A missing, duplicate or\n"
        "  unreadable rank file is named on stderr (exit 2); the others are still reported.\n",
        stdout);
    return 0;
  }
  if (names_ranks(args.positional()))
    return print_cross_rank(args.positional(), args.has("--json"), args.count("--top", 10));
  args.expect_positional(1, "one SNAPSHOT file");
  const std::string& path = args.positional()[0];
  const CompactSnapshot snap = load_cli_snapshot(path);
  if (args.has("--json")) {
    print_summary_json(path, snap);
    return 0;
  }
  const std::size_t top = args.count("--top", 10);
  std::printf("snapshot %s\n%s%s%s", path.c_str(), format_summary(summarize(snap), top).c_str(),
              format_peak_allocated(snap).c_str(), format_timeline_peaks(snap).c_str());
  for (const StepReport& r : snapshot_steps(snap)) std::fputs(format_steps(r, top).c_str(), stdout);
  for (const DeviceMemory& m : snap.device_memory) std::fputs(format_device_memory(m).c_str(), stdout);
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
