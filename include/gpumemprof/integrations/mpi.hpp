// Layer 6: gpumemprof on MPI -- per-rank stats and snapshots of a multi-process run. The only
// file that includes <mpi.h>; link MPI yourself (Meson: dependency('mpi', language: 'cpp'), or
// build with mpicxx).
//
//   gmp::mpi::dump_on_oom("mem-dump", "cuda:0");                  // once, after MPI_Init
//   ...
//   auto all = gmp::mpi::gather_memory_stats("cuda:0");           // collective; rank 0 gets all
//   if (rank == 0) std::printf("worst rank %d\n", gmp::largest_peak(all).rank);
//   gmp::mpi::dump_snapshots("mem-dump", "cuda:0");               // collective: rank-<R>.pickle + ranks.json
//   // then: gpumemprof summary mem-dump
//
// Every rank writes its own file (no data goes through MPI but a few numbers and names), so a
// dump costs what one snapshot costs. An OOM writes that rank's snapshot and OOM report without
// any collective: the other ranks may be waiting in one.
#pragma once

// The C API only: OpenMPI's and MPICH's deprecated C++ bindings do not compile warning-free.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/analysis/rank_budget.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace mpi {

namespace detail {

inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("gpumemprof::mpi: ") + what +
                           " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

inline int comm_rank(MPI_Comm comm) {
  int r = 0;
  check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  return r;
}
inline int comm_size(MPI_Comm comm) {
  int n = 0;
  check(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  return n;
}

// What each rank tells rank 0 for ranks.json: fixed-size, so one MPI_Gather carries it.
struct RankRecord {
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::int64_t num_ooms = 0;
  std::int64_t written = 0;  // 1: the rank file was written
  char host[256] = {};
  char device[32] = {};
  char error[512] = {};
};

}  // namespace detail

/// Collective over `comm`: every rank's memory_stats of `device`; on rank 0 one entry per rank in
/// rank order, empty on the others.
inline std::vector<MemoryStats> gather_memory_stats(const Device& device, MPI_Comm comm = MPI_COMM_WORLD) {
  // Plain bytes: every rank runs the same program, so MemoryStats has one layout.
  static_assert(std::is_trivially_copyable_v<MemoryStats>);
  const MemoryStats mine = default_allocator(device).memory_stats();
  const int rank = detail::comm_rank(comm);
  const int world = detail::comm_size(comm);
  std::vector<MemoryStats> all(rank == 0 ? static_cast<std::size_t>(world) : 0);
  detail::check(MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0, comm),
                "MPI_Gather of memory_stats");
  return all;
}

/// Collective over `comm`: creates `dir`; every rank writes `dir/rank-<R>.pickle` (its snapshot of
/// `device`, which PyTorch's viewer opens, with top-level keys rank, world_size, host, device and
/// the peaks of its memory_stats); rank 0 writes `dir/ranks.json` (rank, host, device, peaks,
/// file, per rank). Every rank takes part even when its own write fails; then the rank whose
/// write failed throws IoError (ranks.json marks its file as missing, with the reason).
inline void dump_snapshots(const std::string& dir, const Device& device, MPI_Comm comm = MPI_COMM_WORLD) {
  const int rank = detail::comm_rank(comm);
  const int world = detail::comm_size(comm);
  detail::RankRecord mine;
  std::string failure;
  try {
    const RankInfo info = dump_rank_snapshot(default_allocator(device), dir, rank, world);
    mine.peak_allocated = info.peak_allocated_bytes;
    mine.peak_reserved = info.peak_reserved_bytes;
    mine.num_ooms = info.num_ooms;
    mine.written = 1;
    std::strncpy(mine.host, info.host.c_str(), sizeof mine.host - 1);
    std::strncpy(mine.device, info.device.c_str(), sizeof mine.device - 1);
  } catch (const std::exception& e) {
    failure = e.what();
    std::strncpy(mine.error, e.what(), sizeof mine.error - 1);
  }
  std::vector<detail::RankRecord> all(rank == 0 ? static_cast<std::size_t>(world) : 0);
  detail::check(MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0, comm),
                "MPI_Gather of the rank files");
  if (rank == 0) {
    try {
      write_file_atomically((std::filesystem::path(dir) / "ranks.json").string(), [&](std::ostream& os) {
        JsonWriter w(os);
        w.begin_dict();
        w.field("world_size", world);
        w.key("ranks");
        w.begin_list();
        for (int r = 0; r < world; ++r) {
          const detail::RankRecord& rec = all[static_cast<std::size_t>(r)];
          w.begin_dict();
          w.field("rank", r);
          w.field("host", std::string(rec.host));
          w.field("device", std::string(rec.device));
          w.field("peak_allocated_bytes", rec.peak_allocated);
          w.field("peak_reserved_bytes", rec.peak_reserved);
          w.field("num_ooms", rec.num_ooms);
          w.key("file");
          if (rec.written != 0) {
            w.value("rank-" + std::to_string(r) + ".pickle");
          } else {
            w.value(nullptr);
          }
          if (rec.written == 0) w.field("error", std::string(rec.error));
          w.end_dict();
        }
        w.end_list();
        w.end_dict();
        w.finish();
      });
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
    }
  }
  detail::check(MPI_Barrier(comm), "MPI_Barrier after the rank files");  // every file is there on return
  if (!failure.empty())
    throw IoError("gpumemprof::mpi::dump_snapshots on rank " + std::to_string(rank) + ": " + failure);
}

/// At every OOM of `device`'s default allocator on this rank, writes `dir/rank-<R>.pickle` (the
/// snapshot at the OOM, marked with the rank) and `dir/rank-<R>.oom.txt` (the OOM report: cause,
/// largest free block, segments, top allocation sites) before OutOfMemoryError reaches the caller.
/// No collective: other ranks may be blocked in one. Call after MPI_Init; `comm` gives the rank.
/// Returns the reporter (analysis/oom_report.hpp) for the reports themselves.
inline std::shared_ptr<OomReporter> dump_on_oom(std::string dir, const Device& device, MPI_Comm comm = MPI_COMM_WORLD) {
  return attach_rank_oom_dump(default_allocator(device), std::move(dir), detail::comm_rank(comm),
                              detail::comm_size(comm));
}

}  // namespace mpi
GPUMEMPROF_NAMESPACE_END
