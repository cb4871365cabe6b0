// `gpumemprof replay SNAPSHOT`: replays the history of a memory snapshot (PyTorch's or ours)
// through our allocator on the simulated device -- what the run would have reserved under
// another ALLOC_CONF (analysis/snapshot_replay.hpp says which events count and how).
#pragma once

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/detail/parse_bytes.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "trace.hpp"

namespace gpumemprof::tools {

/// Whether file bytes are a snapshot (a pickle or a JSON document) rather than a text trace.
inline bool is_snapshot_bytes(std::string_view bytes) {
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) return true;
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

/// A byte count in words (format_size), from any integer type.
template <class Bytes>
std::string size_text(Bytes b) {
  return format_size(static_cast<std::uint64_t>(b));
}

/// A snapshot file as every command reads it: a pickle or JSON, gzip-compressed or not (a plain
/// pickle is streamed).
inline CompactSnapshot load_cli_snapshot(const std::string& path) {
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    const int first = std::fgetc(f);
    const int second = std::fgetc(f);
    std::fclose(f);
    if (first == 0x1f && second == 0x8b) return parse_compact_snapshot(read_gzip_file(path), path);
  }
  return load_compact_snapshot(path);
}

/// The device whose trace a one-device command reads: --device N, else `fallback` (-1: the first
/// device with a trace). A device without one is a usage error naming those that have one.
inline int traced_device_option(const Args& args, const CompactSnapshot& snap, const std::string& path,
                                int fallback = -1) {
  std::string with_traces;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (snap.device_traces[d].empty()) continue;
    with_traces += (with_traces.empty() ? "" : ", ") + std::to_string(d);
    if (fallback < 0) fallback = static_cast<int>(d);
  }
  const auto device = static_cast<int>(args.count("--device", fallback < 0 ? 0 : fallback, 1 << 20));
  const bool known = static_cast<std::size_t>(device) < snap.device_traces.size() &&
                     !snap.device_traces[static_cast<std::size_t>(device)].empty();
  if (!known) {
    throw UsageError(path + " has no trace for device " + std::to_string(device) +
                     (with_traces.empty() ? "; record history (record_memory_history) before taking the snapshot"
                                          : "; devices with a trace: " + with_traces + " (--device N)"));
  }
  return device;
}

/// The config as the user would write it ("<default>" when empty).
inline std::string config_label(const AllocatorConfig& c) { return c.source.empty() ? "<default>" : c.source; }

/// The runs of replay_snapshot for each traced device; a snapshot with no trace is a usage error.
template <SnapshotLike S>
std::vector<SnapshotReplayResult> replay_snapshot_devices(const S& snap, const std::string& path,
                                                          const SnapshotReplayOptions& opt) {
  const std::vector<int> devices = traced_devices(snap);
  if (devices.empty()) {
    throw UsageError(path +
                     ": the snapshot has no trace events to replay; record them with "
                     "torch.cuda.memory._record_memory_history() (or gpumemprof's record_memory_history) first");
  }
  std::vector<SnapshotReplayResult> out;
  for (int d : devices) out.push_back(replay_snapshot(snap, d, opt));
  return out;
}

inline void print_snapshot_replay_text(const std::string& path, const AllocatorConfig& config,
                                       const SnapshotReplayResult& r) {
  std::printf("replay of %s (device %d's trace) on sim:%d, config %s\n", path.c_str(), r.device, r.device,
              config_label(config).c_str());
  if (r.seed.any()) {
    std::printf(
        "  history starts mid-run: seeded with %zu %s (%s) and %zu live %s (%s) that existed before its first "
        "event\n",
        r.seed.segments, plural(r.seed.segments, "segment").c_str(), size_text(r.seed.reserved_bytes).c_str(),
        r.seed.blocks, plural(r.seed.blocks, "block").c_str(), size_text(r.seed.allocated_bytes).c_str());
    if (r.seed.estimated_blocks != 0 || r.seed.orphan_blocks != 0 || !r.seed.exact_layout) {
      std::printf(
          "  (seed approximate: %zu block sizes estimated from free events, %zu blocks in no known segment%s)\n",
          r.seed.estimated_blocks, r.seed.orphan_blocks,
          r.seed.exact_layout ? "" : ", segment layout not reproduced exactly");
    }
  }
  std::printf("  capacity              %12llu  (%s, %s)\n", static_cast<unsigned long long>(r.capacity),
              size_text(r.capacity).c_str(),
              r.capacity_inferred ? "inferred from the recorded OOM" : "--capacity or default");
  std::printf("  events                %12zu  (%zu alloc, %zu free_requested, %zu free_completed)\n", r.events,
              r.allocs, r.free_requested, r.frees);
  std::printf("  peak_requested_bytes  %12llu  (%s: the live-bytes limit)\n",
              static_cast<unsigned long long>(r.peak_requested_bytes), size_text(r.peak_requested_bytes).c_str());
  std::printf("  peak_allocated_bytes  %12lld  (%s)\n", static_cast<long long>(r.peak_allocated),
              size_text(r.peak_allocated).c_str());
  const double rec = static_cast<double>(r.recorded_peak_reserved);
  std::printf("  peak_reserved_bytes   %12lld  (%s; recorded %s, %+.1f%%)\n", static_cast<long long>(r.peak_reserved),
              size_text(r.peak_reserved).c_str(), size_text(r.recorded_peak_reserved).c_str(),
              rec > 0 ? (static_cast<double>(r.peak_reserved) - rec) * 100.0 / rec : 0.0);
  for (const PoolReplay& p : r.pools) {
    const double prec = static_cast<double>(p.recorded_peak_reserved);
    std::printf("  pool (%llu, %llu) peak reserved  %s (recorded %s, %+.1f%%)\n",
                static_cast<unsigned long long>(p.id.first), static_cast<unsigned long long>(p.id.second),
                size_text(p.peak_reserved).c_str(), size_text(p.recorded_peak_reserved).c_str(),
                prec > 0 ? (static_cast<double>(p.peak_reserved) - prec) * 100.0 / prec : 0.0);
  }
  std::printf("  num_device_alloc      %12lld  (recorded segment_alloc: %zu)\n",
              static_cast<long long>(r.num_device_alloc), r.recorded_segment_allocs);
  if (r.empty_cache_calls != 0) {
    std::printf("  empty_cache calls     %12zu  (inferred from runs of segment_free)\n", r.empty_cache_calls);
  }
  if (r.recorded_ooms != 0) {
    std::printf("  recorded OOMs         %12zu  (%zu would happen again, %zu avoided)\n", r.recorded_ooms,
                r.ooms_reproduced, r.ooms_avoided);
  }
  if (r.new_ooms != 0) {
    std::printf("  new OOMs              %12zu  (allocations the recorded run made; first at event %zu)\n", r.new_ooms,
                r.first_new_oom_event);
  }
  if (r.unknown_frees != 0) {
    std::printf("  ignored frees         %12zu  (of addresses nothing allocated)\n", r.unknown_frees);
  }
}

inline void print_snapshot_replay_json(const std::string& path, const AllocatorConfig& config,
                                       const std::vector<SnapshotReplayResult>& runs) {
  JsonWriter w(std::cout);
  w.begin_dict();
  w.field("snapshot", path);
  w.field("config", config.source);
  w.key("devices");
  w.begin_list();
  for (const SnapshotReplayResult& r : runs) {
    w.begin_dict();
    w.field("device", r.device);
    w.field("capacity_bytes", r.capacity);
    w.field("capacity_inferred", r.capacity_inferred);
    w.field("events", r.events);
    w.field("allocs", r.allocs);
    w.field("frees", r.frees);
    w.field("peak_requested_bytes", r.peak_requested_bytes);
    w.field("peak_allocated_bytes", r.peak_allocated);
    w.field("peak_reserved_bytes", r.peak_reserved);
    w.field("recorded_peak_reserved_bytes", r.recorded_peak_reserved);
    w.field("num_device_alloc", r.num_device_alloc);
    w.field("recorded_segment_allocs", r.recorded_segment_allocs);
    w.field("empty_cache_calls", r.empty_cache_calls);
    w.field("recorded_ooms", r.recorded_ooms);
    w.field("ooms_reproduced", r.ooms_reproduced);
    w.field("ooms_avoided", r.ooms_avoided);
    w.field("new_ooms", r.new_ooms);
    w.field("unknown_frees", r.unknown_frees);
    w.key("pools");  // private pools: segment_pool_id, peak reserved bytes recorded and replayed
    w.begin_list();
    for (const PoolReplay& p : r.pools) {
      w.begin_dict();
      w.key("segment_pool_id");
      w.begin_list();
      w.value(p.id.first);
      w.value(p.id.second);
      w.end_list();
      w.field("peak_reserved_bytes", p.peak_reserved);
      w.field("recorded_peak_reserved_bytes", p.recorded_peak_reserved);
      w.end_dict();
    }
    w.end_list();
    w.key("seed");
    w.begin_dict();
    w.field("segments", r.seed.segments);
    w.field("blocks", r.seed.blocks);
    w.field("reserved_bytes", r.seed.reserved_bytes);
    w.field("allocated_bytes", r.seed.allocated_bytes);
    w.field("estimated_blocks", r.seed.estimated_blocks);
    w.field("orphan_blocks", r.seed.orphan_blocks);
    w.field("exact_layout", r.seed.exact_layout);
    w.end_dict();
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
  w.finish();
  std::cout << '\n' << std::flush;
}

/// A size option (`flag`: "--capacity", "--reduction-cap") in bytes with units ("40GiB"), or 0
/// when absent.
inline std::size_t bytes_option(const Args& args, const std::string& flag) {
  if (!args.has(flag)) return 0;
  try {
    return gpumemprof::detail::parse_bytes(args.get(flag), flag);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

/// Whether the file at `path` starts like a snapshot (uncompressed; a gzip file says no).
inline bool is_snapshot_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;  // read_gzip_file reports it
  char head[64];
  const std::size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return is_snapshot_bytes(std::string_view(head, n));
}

/// `replay` on a snapshot (`bytes` when already read, else streamed from `path`): --device must
/// be simulated (the replay is a what-if).
inline int cmd_replay_snapshot(const Args& args, const std::string& path, const std::string* bytes) {
  if (args.has("--device") && args.get("--device").rfind("sim:", 0) != 0) {
    throw UsageError("a snapshot replays on the simulated device only; drop --device or use sim:N");
  }
  if (args.has("--snapshot") || args.has("--max-entries")) {
    throw UsageError("--snapshot and --max-entries apply to trace replays, not to snapshot replays");
  }
  SnapshotReplayOptions opt;
  if (args.has("--config")) opt.config = AllocatorConfig(args.get("--config"));
  opt.capacity = bytes_option(args, "--capacity");
  const CompactSnapshot snap = bytes != nullptr ? parse_compact_snapshot(*bytes, path) : load_compact_snapshot(path);
  const std::vector<SnapshotReplayResult> runs = replay_snapshot_devices(snap, path, opt);
  if (args.has("--json")) {
    print_snapshot_replay_json(path, opt.config, runs);
  } else {
    for (const SnapshotReplayResult& r : runs) print_snapshot_replay_text(path, opt.config, r);
  }
  return 0;
}

}  // namespace gpumemprof::tools
