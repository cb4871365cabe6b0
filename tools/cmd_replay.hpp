// `gpumemprof replay TRACE`: replays a recorded PyTorch request stream through our allocator on
// a simulated or real device and reports what it held and how fast it answered.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "replay.hpp"
#include "trace.hpp"
#include "trace_frames.hpp"

namespace gpumemprof::tools {

inline const char* replay_usage() {
  return "usage: gpumemprof replay TRACE [--device sim:0|cuda:0] [--config \"<ALLOC_CONF>\"]\n"
         "                        [--snapshot OUT.pickle [--max-entries N]] [--repeat N] [--json]\n"
         "                        [--segment-addresses FILE]\n"
         "       gpumemprof replay SNAPSHOT [--config \"<ALLOC_CONF>\"] [--capacity BYTES] [--json]\n"
         "  Replays a trace (the format below, gzip or text) through the caching allocator.\n"
         "  Peaks come from the first (cold) replay; ns_per_pair is the best of N warm replays\n"
         "  (default 3) on the same allocator. --snapshot records\n"
         "  the cold replay's history (no stacks: they would show this tool; the warm replays are\n"
         "  not recorded, as recording would change their timing) and writes it, with the blocks\n"
         "  live at its end, as a PyTorch snapshot (.pickle) or JSON (.json); an annotation spanning\n"
         "  the trace says what it holds. History takes about 200 bytes an event while writing;\n"
         "  --max-entries N keeps only the newest N events (the annotation then says so).\n"
         "  --segment-addresses FILE: the simulated device places its mallocs where the recording\n"
         "  driver placed them (lines with 'segment_alloc ADDRESS BYTES', in order, as PyTorch's history\n"
         "  lists them): the default policy breaks ties between equal-size free blocks by address, so\n"
         "  replays then give the recording's own figures. Without it, sim:N places mallocs as an H200's\n"
         "  driver (580) did (docs/sim-placement.md).\n"
         "  A SNAPSHOT (PyTorch's or ours, recognised by content) replays its recorded history on the\n"
         "  simulated device and compares peak reserved with what was recorded; --capacity sets the\n"
         "  device size (default: inferred from a recorded OOM, else 80GiB).\n"
         "trace format (text, optionally gzip-compressed), one event a line:\n"
         "  # workload=<name> ...      comment or header line\n"
         "  a <id> <bytes> <stream>    allocate block <id> of <bytes> (requested size) on <stream>\n"
         "                             (0 = the default stream)\n"
         "  f <id>                     free block <id>\n"
         "  Ids are any integers below 2^64; blocks still live at the end are never freed. Example:\n"
         "    a 0 1048576 0\n"
         "    a 1 512 0\n"
         "    f 0\n";
}

struct ReplayReport {
  std::string trace;
  std::string device;
  ReplayResult result;
  int warm_runs = 0;               // --repeat: 0 = no timing was taken
  double best_ns_per_pair = 0;     // meaningful only when warm_runs > 0
  double warm_device_allocs = 0;   // device allocations (maps) per warm replay, on average
  double warm_device_frees = 0;    // device frees (unmaps) per warm replay, on average
  double warm_mapped_bytes = 0;    // bytes those device allocations took, per warm replay
  double warm_unmapped_bytes = 0;  // bytes those device frees gave back, per warm replay
  // The most reserved over the cold and every warm replay (a cache that creeps up shows here).
  std::int64_t warm_peak_reserved = 0;
  // --snapshot: what the written snapshot holds.
  std::string snapshot_note;
  std::size_t snapshot_events = 0;   // trace entries in it
  std::size_t snapshot_dropped = 0;  // older entries of the cold replay left out (--max-entries)
};

/// The sentence the snapshot of a replay carries (as an annotation) and the CLI prints.
inline std::string replay_snapshot_note(const std::string& trace, int repeat, std::size_t events, std::size_t dropped) {
  std::string note = "gpumemprof replay of " + trace + ": the cold replay (run 1 of " + std::to_string(repeat + 1) +
                     (repeat == 0 ? ")" : "; the warm runs are not recorded)");
  if (dropped != 0) {
    note += ", its newest " + std::to_string(events) + " of " + std::to_string(events + dropped) +
            " events (--max-entries)";
  } else {
    note += ", all " + std::to_string(events) + " events";
  }
  return note;
}

/// Cold replay (peaks; recorded into `snapshot_path` when given), then `repeat` warm replays
/// (timing) on one allocator.
/// The recorded cudaMalloc addresses in a file (--segment-addresses): every line with a
/// `segment_alloc ADDRESS BYTES` word sequence, in order (as PyTorch's history lists them).
inline std::vector<std::pair<std::uintptr_t, std::size_t>> read_segment_addresses(const std::string& path) {
  std::istringstream in(read_gzip_file(path));
  std::vector<std::pair<std::uintptr_t, std::size_t>> out;
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::string w;
    while (words >> w && w != "segment_alloc") {
    }
    if (w != "segment_alloc") continue;
    unsigned long long addr = 0, bytes = 0;
    if (!(words >> addr >> bytes)) {
      throw UsageError(path + ":" + std::to_string(n) + ": expected 'segment_alloc ADDRESS BYTES' (decimal integers)");
    }
    out.emplace_back(static_cast<std::uintptr_t>(addr), static_cast<std::size_t>(bytes));
  }
  if (out.empty())
    throw UsageError(path + ": no 'segment_alloc ADDRESS BYTES' line; give the recorded segment history");
  return out;
}

inline ReplayReport run_replay(Trace& t, const Device& device, const AllocatorConfig& config, int repeat, bool progress,
                               const std::string& snapshot_path = {}, std::size_t max_entries = 0,
                               const std::vector<std::pair<std::uintptr_t, std::size_t>>& segment_addresses = {}) {
  const ReplayStreams streams(device, t);  // outlives the allocator, whose cache refers to them
  DeviceAllocator alloc(AnyBackend::for_device(device), config);
  if (!segment_addresses.empty()) {
    SimulatedBackend* sim = alloc.backend().target<SimulatedBackend>();
    if (sim == nullptr) throw UsageError("--segment-addresses applies to simulated devices (sim:N)");
    sim->set_placement(segment_addresses);
  }
  HistoryRecorder history(HistoryOptions{.enabled = HistoryEnabled::all,
                                         .context = HistoryContext::none,
                                         .stacks = HistoryStacks::none,
                                         .max_entries = max_entries != 0 ? max_entries : HistoryOptions{}.max_entries},
                          alloc.device_index());
  if (!snapshot_path.empty()) history.attach(alloc);
  ReplayReport rep;
  rep.trace = t.path;
  rep.device = device.str();
  std::vector<void*> live;
  auto say = [&](int run) {
    if (progress) std::fprintf(stderr, "\rreplaying %zu allocations: run %d of %d ", t.allocs, run, repeat + 1);
  };
  say(1);
  rep.result = replay(t, alloc, &live);
  if (!snapshot_path.empty()) {
    if (progress) std::fprintf(stderr, "\rwriting %s ", snapshot_path.c_str());
    Snapshot snap = gpumemprof::snapshot(alloc);
    history.detach();
    add_trace_frames(snap, t, alloc.device_index());  // each block names its line in the trace
    const auto& trace = snap.device_traces.at(static_cast<std::size_t>(std::max(alloc.device_index(), 0)));
    rep.snapshot_events = trace.size();
    rep.snapshot_dropped = history.dropped_entries();
    rep.snapshot_note = replay_snapshot_note(t.path, repeat, rep.snapshot_events, rep.snapshot_dropped);
    if (!trace.empty()) {  // an annotation over the whole trace: viewers show what the file holds
      snap.external_annotations.push_back({rep.snapshot_note, true, alloc.device_index(), trace.front().time_us});
      snap.external_annotations.push_back({rep.snapshot_note, false, alloc.device_index(), trace.back().time_us});
    }
    write_snapshot_file(snap, snapshot_path);
  }
  for (void* p : live) alloc.deallocate(p);
  rep.warm_runs = repeat;
  rep.best_ns_per_pair = rep.result.ns_per_pair;
  const MemoryStats cold = alloc.memory_stats();
  for (int i = 0; i < repeat; ++i) {
    say(i + 2);
    const ReplayResult warm = replay(t, alloc, &live);
    for (void* p : live) alloc.deallocate(p);
    if (i == 0 || warm.ns_per_pair < rep.best_ns_per_pair) rep.best_ns_per_pair = warm.ns_per_pair;
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  if (repeat > 0) {  // a cache that settled makes none
    const MemoryStats end = alloc.memory_stats();
    rep.warm_device_allocs = static_cast<double>(end.num_device_alloc - cold.num_device_alloc) / repeat;
    rep.warm_device_frees = static_cast<double>(end.num_device_free - cold.num_device_free) / repeat;
    rep.warm_mapped_bytes =
        static_cast<double>(end.reserved_bytes.all().allocated - cold.reserved_bytes.all().allocated) / repeat;
    rep.warm_unmapped_bytes =
        static_cast<double>(end.reserved_bytes.all().freed - cold.reserved_bytes.all().freed) / repeat;
    rep.warm_peak_reserved = end.reserved_bytes.all().peak;
  }
  alloc.validate();
  return rep;
}

inline void print_replay(const ReplayReport& rep, bool json) {
  const ReplayResult& r = rep.result;
  if (json) {
    JsonWriter w(std::cout);
    w.begin_dict();
    w.field("trace", rep.trace);
    w.field("device", rep.device);
    w.field("allocs", r.allocs);
    w.field("frees", r.frees);
    w.field("peak_requested_bytes", r.peak_requested_bytes);
    w.field("peak_allocated_bytes", r.peak_allocated_bytes);
    w.field("peak_reserved_bytes", r.peak_reserved_bytes);
    w.field("num_device_alloc", r.num_device_alloc);
    // --repeat 0 times nothing: null, not the cold replay's first-touch figure.
    w.field("ns_per_pair", rep.warm_runs > 0 ? std::round(rep.best_ns_per_pair * 10.0) / 10.0
                                             : std::numeric_limits<double>::quiet_NaN());
    if (rep.warm_runs > 0) {
      w.field("warm_num_device_alloc", rep.warm_device_allocs);
      w.field("warm_num_device_free", rep.warm_device_frees);
      w.field("warm_reserved_bytes_allocated", rep.warm_mapped_bytes);
      w.field("warm_reserved_bytes_freed", rep.warm_unmapped_bytes);
      w.field("warm_peak_reserved_bytes", rep.warm_peak_reserved);
    }
    if (!rep.snapshot_note.empty()) {
      w.key("snapshot");
      w.begin_dict();
      w.field("events", rep.snapshot_events);
      w.field("dropped_events", rep.snapshot_dropped);
      w.field("note", rep.snapshot_note);
      w.end_dict();
    }
    w.end_dict();
    w.finish();
    std::cout << '\n' << std::flush;
    return;
  }
  const double req = static_cast<double>(r.peak_requested_bytes);
  auto size = [](auto b) { return format_size(static_cast<std::uint64_t>(b)); };
  std::printf("replay of %s on %s\n", rep.trace.c_str(), rep.device.c_str());
  std::printf("  allocs                %12zu\n", r.allocs);
  std::printf("  frees                 %12zu\n", r.frees);
  std::printf("  peak_requested_bytes  %12llu  (%s: the live-bytes limit)\n",
              static_cast<unsigned long long>(r.peak_requested_bytes), size(r.peak_requested_bytes).c_str());
  std::printf("  peak_allocated_bytes  %12lld  (%s, %.3fx requested)\n", static_cast<long long>(r.peak_allocated_bytes),
              size(r.peak_allocated_bytes).c_str(), req > 0 ? static_cast<double>(r.peak_allocated_bytes) / req : 0.0);
  std::printf("  peak_reserved_bytes   %12lld  (%s, %.3fx requested)\n", static_cast<long long>(r.peak_reserved_bytes),
              size(r.peak_reserved_bytes).c_str(), req > 0 ? static_cast<double>(r.peak_reserved_bytes) / req : 0.0);
  std::printf("  num_device_alloc      %12lld\n", static_cast<long long>(r.num_device_alloc));
  if (rep.warm_runs > 0) {
    std::printf("  ns_per_pair           %12.1f  (best of %d warm replays)\n", rep.best_ns_per_pair, rep.warm_runs);
    std::printf("  device allocs / frees %12.1f / %.1f per warm replay (%s reserved / %s released)\n",
                rep.warm_device_allocs, rep.warm_device_frees, size(rep.warm_mapped_bytes).c_str(),
                size(rep.warm_unmapped_bytes).c_str());
  } else {
    std::printf("  ns_per_pair           not measured (--repeat 0: no warm replay)\n");
  }
  if (!rep.snapshot_note.empty()) std::printf("  snapshot: %s\n", rep.snapshot_note.c_str());
}

/// Whether `path` ends in an extension --snapshot writes: .pickle or .pkl (a pickle), .json (any case).
inline bool has_snapshot_extension(const std::string& path) {
  const auto dot = path.find_last_of("./");
  if (dot == std::string::npos || path[dot] != '.') return false;
  std::string ext = path.substr(dot);
  for (char& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext == ".pickle" || ext == ".pkl" || ext == ".json";
}

inline int cmd_replay(int argc, char** argv) {
  const Args args(
      argc, argv, 2, {"--json", "--help"},
      {"--device", "--config", "--snapshot", "--repeat", "--capacity", "--max-entries", "--segment-addresses"});
  if (args.has("--help")) {
    std::fputs(replay_usage(), stdout);
    return 0;
  }
  args.expect_positional(1, "one TRACE file");
  const std::string snapshot_out = args.output_file("--snapshot", args.positional());
  if (!snapshot_out.empty() && !has_snapshot_extension(snapshot_out)) {
    throw UsageError("--snapshot '" + snapshot_out +
                     "': name the file .pickle (PyTorch's snapshot, for its memory viewer) or .json");
  }
  if (is_snapshot_file(args.positional()[0])) return cmd_replay_snapshot(args, args.positional()[0], nullptr);
  const std::string bytes = read_gzip_file(args.positional()[0]);
  if (is_snapshot_bytes(bytes)) return cmd_replay_snapshot(args, args.positional()[0], &bytes);
  if (args.has("--capacity")) throw UsageError("--capacity applies to snapshot replays");
  if (args.has("--max-entries") && !args.has("--snapshot")) throw UsageError("--max-entries applies with --snapshot");
  const Device device(args.get("--device", "sim:0"));
  const AllocatorConfig config = args.has("--config") ? AllocatorConfig(args.get("--config")) : AllocatorConfig{};
  const int repeat = static_cast<int>(args.count("--repeat", 3, 1000));
  Trace t = parse_trace(bytes, args.positional()[0]);
  std::vector<std::pair<std::uintptr_t, std::size_t>> addresses;
  if (args.has("--segment-addresses")) addresses = read_segment_addresses(args.get("--segment-addresses"));
  const ReplayReport rep = run_replay(t, device, config, repeat, ::isatty(2) != 0 && !args.has("--json"), snapshot_out,
                                      args.count("--max-entries", 0), addresses);
  print_replay(rep, args.has("--json"));
  return 0;
}

}  // namespace gpumemprof::tools
