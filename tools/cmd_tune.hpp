// `gpumemprof tune SNAPSHOT`: replays a snapshot's history under a grid of allocator configs and
// ranks them by whether the recorded OOM would have happened, then by peak reserved bytes.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_ranks.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "tune_grid.hpp"

namespace gpumemprof::tools {

struct TuneRow {
  std::string config;
  std::string unsupported;           // why the allocator refused the config (empty: it ran)
  std::uint64_t peak_reserved = 0;   // summed over the traced devices
  std::uint64_t peak_allocated = 0;  // summed over the traced devices
  bool oom = false;
  std::string oom_note;
};

inline TuneRow tune_one(const CompactSnapshot& snap, const std::string& path, const std::string& conf,
                        std::size_t capacity) {
  TuneRow row;
  row.config = conf;
  SnapshotReplayOptions opt;
  opt.capacity = capacity;
  try {
    opt.config = AllocatorConfig(conf);
    for (const SnapshotReplayResult& r : replay_snapshot_devices(snap, path, opt)) {
      row.peak_reserved += static_cast<std::uint64_t>(r.peak_reserved);
      row.peak_allocated += static_cast<std::uint64_t>(r.peak_allocated);
      if (r.new_ooms != 0) {
        row.oom = true;
        row.oom_note = "yes, at event " + std::to_string(r.first_new_oom_event);
      } else if (r.ooms_reproduced != 0 && !row.oom) {
        row.oom = true;
        row.oom_note = "yes, as recorded";
      }
    }
    if (!row.oom) row.oom_note = "no";
  } catch (const ConfigError&) {
    row.unsupported = "not supported by this build";
  }
  return row;
}

inline int cmd_tune(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--capacity"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof tune SNAPSHOT|RANK_DIR [--capacity BYTES]\n"
        "  Replays the snapshot's history (PyTorch's or ours) under a grid of PYTORCH_CUDA_ALLOC_CONF\n"
        "  settings on the simulated device and ranks them: configs that avoid the recorded OOM first,\n"
        "  then by peak reserved bytes. The last line is the setting to use. --capacity sets the device\n"
        "  size (default: inferred from a recorded OOM, else 80GiB). A folder of rank files: the rank with\n"
        "  the largest peak allocated bytes.\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file or rank folder");
  const std::string path = worst_rank_file(args.positional()[0], "tune");  // a rank folder: its worst rank
  const std::size_t capacity = bytes_option(args, "--capacity");
  const CompactSnapshot snap = load_cli_snapshot(path);  // gzip-compressed too
  const std::vector<int> devices = traced_devices(snap);
  // The recorded side, once, from the default replay's view of the trace.
  const std::vector<SnapshotReplayResult> base = replay_snapshot_devices(snap, path, {{}, capacity});
  std::uint64_t recorded = 0;
  std::size_t recorded_ooms = 0;
  for (const SnapshotReplayResult& r : base) {
    recorded += r.recorded_peak_reserved;
    recorded_ooms += r.recorded_ooms;
  }

  std::vector<TuneRow> rows;
  for (const std::string& conf : tune_grid()) rows.push_back(tune_one(snap, path, conf, capacity));
  std::stable_sort(rows.begin(), rows.end(), [](const TuneRow& a, const TuneRow& b) {
    if (a.unsupported.empty() != b.unsupported.empty()) return a.unsupported.empty();
    if (a.oom != b.oom) return !a.oom;
    return a.peak_reserved < b.peak_reserved;
  });

  std::printf("tune %s: %zu configs replayed on the simulated device (%zu device trace%s)\n", path.c_str(), rows.size(),
              devices.size(), devices.size() == 1 ? "" : "s");
  const SnapshotReplayResult& b0 = base.front();
  std::printf("device capacity %s (%s); recorded: peak reserved %s, %zu OOM%s\n", size_text(b0.capacity).c_str(),
              capacity != 0          ? "--capacity"
              : b0.capacity_inferred ? "inferred from the recorded OOM"
                                     : "default",
              size_text(recorded).c_str(), recorded_ooms, recorded_ooms == 1 ? "" : "s");
  std::printf("%4s  %14s  %10s  %-18s  %s\n", "rank", "peak reserved", "vs default", "OOM", "PYTORCH_CUDA_ALLOC_CONF");
  const auto def = std::find_if(rows.begin(), rows.end(), [](const TuneRow& r) { return r.config.empty(); });
  const double def_peak = static_cast<double>(def->peak_reserved);
  int rank = 0;
  for (const TuneRow& r : rows) {
    const std::string label = r.config.empty()            ? "<default>"
                              : gpumemprof_only(r.config) ? r.config + "  (gpumemprof-only)"
                                                          : r.config;
    if (!r.unsupported.empty()) {
      std::printf("%4s  %14s  %10s  %-18s  %s  (%s)\n", "-", "-", "-", "-", label.c_str(), r.unsupported.c_str());
      continue;
    }
    const std::string peak = size_text(r.peak_reserved);
    char rel[32];
    std::snprintf(rel, sizeof rel, "%+.1f%%",
                  def_peak > 0 ? (static_cast<double>(r.peak_reserved) - def_peak) * 100.0 / def_peak : 0.0);
    std::printf("%4d  %14s  %10s  %-18s  %s\n", ++rank, peak.c_str(), rel, r.oom_note.c_str(), label.c_str());
  }
  // The last line is PyTorch's best setting; a gpumemprof-only config that beats it gets its own line.
  const TuneRow& best =
      *std::find_if(rows.begin(), rows.end(), [](const TuneRow& r) { return !gpumemprof_only(r.config); });
  const TuneRow& first = rows.front();
  if (&first != &best && first.unsupported.empty() && (first.oom ? 1 : 0) <= (best.oom ? 1 : 0)) {
    std::printf("gpumemprof only (not a PyTorch option): GPUMEMPROF_ALLOC_CONF=%s reserves %s\n", first.config.c_str(),
                size_text(first.peak_reserved).c_str());
  }
  if (best.oom) std::printf("no config in the grid avoids the OOM; the one with the lowest peak:\n");
  std::printf("PYTORCH_CUDA_ALLOC_CONF=%s\n", best.config.c_str());
  return 0;
}

}  // namespace gpumemprof::tools
