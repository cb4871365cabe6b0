// The rank dump's file helpers (rank_dump.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/snapshot_files.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "?";
  return buf.data();
}

GPUMEMPROF_FUNC std::string rank_file_path(const std::string& dir, std::int64_t rank, std::string_view suffix) {
  return (std::filesystem::path(dir) / ("rank-" + std::to_string(rank) + std::string(suffix))).string();
}

GPUMEMPROF_FUNC void create_dump_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("cannot create the dump folder " + dir + ": " + ec.message());
}

GPUMEMPROF_FUNC void write_rank_oom_dump(const std::string& dir, std::int64_t rank, std::int64_t world_size,
                                         const OomReport& report,
                                         const std::function<Snapshot()>& take_snapshot) noexcept {
  try {
    create_dump_folder(dir);
    const std::string text = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " on " +
                             host_name() + "\n" + report.to_string();
    write_file_atomically(rank_file_path(dir, rank, ".oom.txt"), std::string_view(text));
    write_snapshot_file(take_snapshot(), rank_file_path(dir, rank, ".pickle"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumemprof: rank %lld could not write its OOM dump into %s: %s\n",
                 static_cast<long long>(rank), dir.c_str(), e.what());
  }
}

GPUMEMPROF_NAMESPACE_END
