// The snapshots of a multi-process run: a folder of rank-<R>.pickle files (what
// gpumemprof::mpi::dump_snapshots and gpumemprof_torch.dump_snapshots write) or several snapshot
// files named on the command line, read one at a time into the cross-rank report
// (analysis/cross_rank.hpp). A file that cannot be read is a problem line naming it; the others
// are still reported.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "gpumemprof/analysis/cross_rank.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"

namespace gpumemprof::tools {

/// True when `path` names a folder.
inline bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// The rank a file name gives ("rank-3.pickle" -> 3), or -1.
inline int rank_from_file_name(const std::string& path) {
  static const std::regex pattern(R"(rank-([0-9]{1,6})\.(pickle|json)$)");
  std::smatch m;
  const std::string name = std::filesystem::path(path).filename().string();
  return std::regex_match(name, m, pattern) ? std::stoi(m[1].str()) : -1;
}

/// The rank files of folder `dir`, in rank order; a UsageError when it holds none.
inline std::vector<std::string> rank_files(const std::string& dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (const int r = rank_from_file_name(p); r >= 0) found.emplace_back(r, p);
  }
  if (ec) throw UsageError(dir + ": cannot list the folder (" + ec.message() + ")");
  if (found.empty()) {
    throw UsageError(dir + ": no rank-<R>.pickle files in this folder (write them with gpumemprof::mpi::dump_snapshots or "
                           "gpumemprof_torch.dump_snapshots, or name the snapshot files)");
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [r, p] : found) out.push_back(std::move(p));
  return out;
}

/// True when the arguments name a multi-process run (one folder, or several files).
inline bool names_ranks(const std::vector<std::string>& positional) {
  return positional.size() > 1 || (positional.size() == 1 && is_directory(positional[0]));
}

/// The cross-rank report of a folder or of several snapshot files. A file without rank keys takes
/// its rank from its name (rank-<R>.pickle), else from its place on the command line.
inline CrossRankReport load_cross_rank(const std::vector<std::string>& positional, std::size_t top_sites = 20) {
  std::vector<std::string> files;
  for (const std::string& p : positional) {
    if (is_directory(p)) {
      for (std::string& f : rank_files(p)) files.push_back(std::move(f));
    } else {
      files.push_back(p);
    }
  }
  CrossRankReport report;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const int by_name = rank_from_file_name(files[i]);
    try {
      report.add(rank_facts(load_compact_snapshot(files[i]), files[i], by_name >= 0 ? by_name : static_cast<int>(i)));
    } catch (const std::exception& e) {
      // Reader errors name the file already; others get its name here.
      const std::string what = e.what();
      report.add_problem(what.rfind(files[i], 0) == 0 ? what : files[i] + ": " + what);
    }
  }
  report.finish(top_sites);
  return report;
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

}  // namespace gpumemprof::tools
