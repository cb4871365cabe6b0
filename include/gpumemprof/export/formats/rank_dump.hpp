// Layer 5: one rank's files in the dump folder of a multi-process run -- `DIR/rank-<R>.pickle` (the
// snapshot, marked with rank, world size, host, device and the peaks of memory_stats in top-level
// keys PyTorch's viewers ignore) and, at an OOM, `DIR/rank-<R>.oom.txt` (the OOM report). Shared by
// integrations/mpi.hpp and the PyTorch bridge; nothing here talks to other ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/analysis/oom_report.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// This machine's host name ("?" when it cannot be read).
[[nodiscard]] std::string host_name();

/// `dir/rank-<rank><suffix>` (suffix ".pickle", ".oom.txt").
[[nodiscard]] std::string rank_file_path(const std::string& dir, std::int64_t rank, std::string_view suffix);

/// Creates `dir` and its parents; IoError naming it on failure.
void create_dump_folder(const std::string& dir);

/// Writes `dir/rank-<rank>.oom.txt` (`report` headed by the rank and host) and then
/// `dir/rank-<rank>.pickle` (what `take_snapshot` returns), creating `dir`. Throws nothing: a
/// failed write is reported on stderr (it runs while an OutOfMemoryError is on its way).
void write_rank_oom_dump(const std::string& dir, std::int64_t rank, std::int64_t world_size, const OomReport& report,
                         const std::function<Snapshot()>& take_snapshot) noexcept;

/// `allocator`'s snapshot marked as rank `rank` of `world_size` on this host, with its peaks.
template <DeviceBackend B>
[[nodiscard]] Snapshot rank_snapshot(const CachingAllocator<B>& allocator, std::int64_t rank, std::int64_t world_size) {
  Snapshot snap = gpumemprof::snapshot(allocator);
  const MemoryStats stats = allocator.memory_stats();
  snap.rank_info.rank = rank;
  snap.rank_info.world_size = world_size;
  snap.rank_info.host = host_name();
  snap.rank_info.device = allocator.device_name();
  snap.rank_info.peak_allocated_bytes = stats.allocated_bytes.all().peak;
  snap.rank_info.peak_reserved_bytes = stats.reserved_bytes.all().peak;
  snap.rank_info.num_ooms = stats.num_ooms;
  return snap;
}

/// Writes `dir/rank-<rank>.pickle` (creating `dir`) and returns the snapshot's rank keys.
template <DeviceBackend B>
RankInfo dump_rank_snapshot(const CachingAllocator<B>& allocator, const std::string& dir, std::int64_t rank,
                            std::int64_t world_size) {
  create_dump_folder(dir);
  const Snapshot snap = rank_snapshot(allocator, rank, world_size);
  write_snapshot_file(snap, rank_file_path(dir, rank, ".pickle"));
  return snap.rank_info;
}

/// At every OOM of `allocator`, writes `dir/rank-<rank>.pickle` (the state at the OOM) and
/// `dir/rank-<rank>.oom.txt` (the OOM report) before OutOfMemoryError reaches the caller; a failed
/// write is reported on stderr. Talks to no other rank. Returns the reporter holding the reports.
template <DeviceBackend B>
std::shared_ptr<OomReporter> attach_rank_oom_dump(CachingAllocator<B>& allocator, std::string dir, std::int64_t rank,
                                                  std::int64_t world_size) {
  OomReportOptions options;
  options.on_report = [&allocator, dir = std::move(dir), rank, world_size](const OomReport& report) {
    write_rank_oom_dump(dir, rank, world_size, report, [&] { return rank_snapshot(allocator, rank, world_size); });
  };
  return attach_oom_reporter(allocator, std::move(options));
}

GPUMEMPROF_NAMESPACE_END

// The bodies of the non-template functions: in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/snapshot_files.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/formats/rank_dump-inl.hpp"
#endif
