// `gpumemprof summary DIR` and `summary A B ...`: the cross-rank report of a folder of rank files or
// of several snapshots (export/reports/rank_summary.hpp reads them).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"

namespace gpumemprof::tools {

/// True when the arguments name a multi-process run (one folder, or several files).
inline bool names_ranks(const std::vector<std::string>& positional) {
  return positional.size() > 1 || (positional.size() == 1 && is_directory(positional[0]));
}

/// `summary DIR` / `summary A B ...`: prints the report (text or JSON); problems go to stderr too,
/// one line each, and make the exit status 2.
inline int print_cross_rank(const std::vector<std::string>& positional, bool json, std::size_t top) {
  const CrossRankReport report = load_cross_rank(positional);
  if (json) {
    std::printf("%s\n", cross_rank_json(report).c_str());
  } else {
    std::fputs(format_cross_rank(report, top).c_str(), stdout);
  }
  for (const std::string& p : report.problems()) std::fprintf(stderr, "gpumemprof summary: %s\n", p.c_str());
  return report.problems().empty() ? 0 : 2;
}

/// Says which rank of `report` (read from `path`) has the largest peak allocated bytes, on stdout,
/// and returns it. The problems (a corrupt or duplicate rank file, a world size that disagrees, a
/// missing rank) go to stderr, one line each, named by `command`: the answer covers the readable
/// ranks. A UsageError when no rank file was readable.
inline const RankFacts& announce_worst_rank(const std::string& path, const CrossRankReport& report, const char* command) {
  for (const std::string& p : report.problems()) {
    std::fprintf(stderr, "gpumemprof %s: %s (left out: the other ranks are compared)\n", command, p.c_str());
  }
  if (report.max_peak_rank() < 0) {
    throw UsageError(path + ": no readable rank file" +
                     (report.problems().empty() ? std::string() : " (" + report.problems().front() + ")"));
  }
  const RankFacts& worst = report.rank(report.max_peak_rank());
  // "of N" is the world size; when the files read are not exactly its ranks, say how many were read.
  const bool every_rank = report.problems().empty() &&
                          static_cast<std::int64_t>(report.ranks().size()) == report.world_size();
  const std::string among =
      every_rank ? std::string() : " of the " + std::to_string(report.ranks().size()) + " rank file(s) read";
  std::printf("%s: rank %d of %lld has the largest peak allocated%s (%s): %s\n", path.c_str(), worst.rank,
              static_cast<long long>(report.world_size()), among.c_str(),
              format_size(static_cast<std::uint64_t>(worst.peak_allocated_bytes)).c_str(), worst.file.c_str());
  return worst;
}

/// `path` itself, or for a folder of rank files the file of its rank with the largest peak
/// allocated bytes (what `tune` and `diff` answer for), saying which as announce_worst_rank() does.
inline std::string worst_rank_file(const std::string& path, const char* command) {
  if (!is_directory(path)) return path;
  return announce_worst_rank(path, load_cross_rank({path}), command).file;
}

}  // namespace gpumemprof::tools
