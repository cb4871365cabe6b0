// The rank dump's file helpers (rank_dump.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/snapshot_files.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

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

GPUMEMPROF_NAMESPACE_END
