// Layer 5: the cross-rank report (analysis/cross_rank.hpp) read from a dump folder or from several
// snapshot files, one at a time, and written as text and as JSON. Backs
// `gpumemprof summary DIR` (a folder of rank-<R>.pickle files) and `gpumemprof summary A B ...`.
//
// Text: a row per rank (host, device, peak allocated and reserved, fragmentation, OOMs, top site),
// the imbalance (largest / smallest peak, which ranks, which site), the sites whose peak bytes
// differ across ranks, and each rank's device memory (rank_device_memory.hpp). JSON: {"ranks":
// [{"rank", "host", "device", "file", "peak_allocated_bytes", "peak_reserved_bytes",
// "external_fragmentation", "num_ooms", "top_site", "top_site_bytes", and the device memory
// fields of rank_device_memory.hpp}, ...], "world_size", "max_peak_rank", "min_peak_rank",
// "max_peak_allocated_bytes", "min_peak_allocated_bytes", "imbalance", "imbalance_site",
// "differing_sites": [{"site", "min_bytes", "min_rank", "max_bytes", "max_rank"}, ...],
// "problems": [...]}.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/cross_rank.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/rank_device_memory.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// True when `path` names a folder.
[[nodiscard]] inline bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

/// The rank a file name gives ("rank-3.pickle" -> 3, 1 to 6 digits, .pickle or .json), or -1.
/// Parsed by hand: std::regex crashed inside the PyTorch bridge (in a process with torch loaded,
/// on two H100s, 2026-11-26), while the CLI read the same files.
[[nodiscard]] inline int rank_from_file_name(const std::string& path) {
  std::string_view name = path;
  name = name.substr(name.rfind('/') + 1);  // npos + 1 == 0
  if (!name.starts_with("rank-")) return -1;
  name.remove_prefix(5);
  for (const std::string_view ext : {".pickle", ".json"}) {
    if (!name.ends_with(ext)) continue;
    const std::string_view digits = name.substr(0, name.size() - ext.size());
    if (digits.empty() || digits.size() > 6) return -1;
    int rank = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return -1;
      rank = rank * 10 + (c - '0');
    }
    return rank;
  }
  return -1;
}

/// The rank files of folder `dir`, in rank order; a UsageError when it holds none.
[[nodiscard]] inline std::vector<std::string> rank_files(const std::string& dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (const int r = rank_from_file_name(p); r >= 0) found.emplace_back(r, p);
  }
  if (ec) throw IoError(dir + ": cannot list the folder (" + ec.message() + ")");
  if (found.empty()) {
    throw IoError(dir +
                  ": no rank-<R>.pickle files in this folder (write them with gpumemprof::mpi::dump_snapshots or "
                  "gpumemprof_torch.dump_snapshots, or name the snapshot files)");
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [r, p] : found) out.push_back(std::move(p));
  return out;
}

/// Called with each snapshot read and its facts, from the reading threads (at the same time).
using RankSnapshotVisitor = std::function<void(const CompactSnapshot&, const RankFacts&)>;

/// The snapshot files the arguments name: a folder's rank files in rank order, other paths as given.
[[nodiscard]] inline std::vector<std::string> input_files(const std::vector<std::string>& positional) {
  std::vector<std::string> files;
  for (const std::string& p : positional) {
    if (is_directory(p)) {
      for (std::string& f : rank_files(p)) files.push_back(std::move(f));
    } else {
      files.push_back(p);
    }
  }
  return files;
}

/// The cross-rank report of a folder or of several snapshot files. A file without rank keys takes
/// its rank from its name (rank-<R>.pickle), else from its place on the command line. Files are
/// read by `jobs` threads (0: one per core, at most 4), each holding one snapshot at a time;
/// `visit` (when set) sees each snapshot before it is dropped (what it throws makes the file a problem).
[[nodiscard]] inline CrossRankReport load_cross_rank(const std::vector<std::string>& positional,
                                                     std::size_t top_sites = 20, unsigned jobs = 0,
                                                     const RankSnapshotVisitor& visit = {}) {
  const std::vector<std::string> files = input_files(positional);
  struct Outcome {
    std::optional<RankFacts> facts;
    std::string problem;
  };
  std::vector<Outcome> outcomes(files.size());
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < files.size(); i = next++) {
      const int by_name = rank_from_file_name(files[i]);
      try {
        const CompactSnapshot snap = load_compact_snapshot(files[i]);
        RankFacts facts = rank_facts(snap, files[i], by_name >= 0 ? by_name : static_cast<int>(i));
        if (visit) visit(snap, facts);
        outcomes[i].facts = std::move(facts);
      } catch (const std::exception& e) {
        // Reader errors name the file already; others get its name here.
        const std::string what = e.what();
        outcomes[i].problem = what.rfind(files[i], 0) == 0 ? what : files[i] + ": " + what;
      }
    }
  };
  if (jobs == 0) jobs = std::clamp(std::thread::hardware_concurrency(), 1U, 4U);
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < jobs && t < files.size(); ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  CrossRankReport report;
  for (Outcome& o : outcomes) {  // in file order, whichever thread read them
    if (o.facts) {
      report.add(std::move(*o.facts));
    } else {
      report.add_problem(std::move(o.problem));
    }
  }
  report.finish(top_sites);
  return report;
}

/// The report as text, with at most `top` differing sites.
[[nodiscard]] inline std::string format_cross_rank(const CrossRankReport& report, std::size_t top = 10) {
  std::string out;
  char buf[512];
  const auto size = [](std::int64_t b) {
    return format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(b, 0)));
  };
  std::snprintf(buf, sizeof buf, "%zu rank(s) of world size %lld\n", report.ranks().size(),
                static_cast<long long>(report.world_size()));
  out += buf;
  std::snprintf(buf, sizeof buf, "%5s  %-16s %-8s %14s %14s %9s %5s  %s\n", "rank", "host", "device", "peak allocated",
                "peak reserved", "ext.frag", "OOMs", "top site (peak requested)");
  out += buf;
  bool any_from_trace = false;
  for (const RankFacts& r : report.ranks()) {
    any_from_trace = any_from_trace || !r.peaks_recorded;
    const std::string site =
        r.top_site.empty() ? std::string("(none)") : r.top_site + " (" + format_size(r.top_site_bytes) + ")";
    std::snprintf(buf, sizeof buf, "%5d  %-16s %-8s %14s %14s %9s %5lld  %s%s\n", r.rank,
                  r.host.empty() ? "?" : r.host.c_str(), r.device.empty() ? "?" : r.device.c_str(),
                  size(r.peak_allocated_bytes).c_str(), size(r.peak_reserved_bytes).c_str(),
                  format_fraction(r.external_fragmentation).c_str(), static_cast<long long>(r.num_ooms), site.c_str(),
                  r.peaks_recorded ? "" : " *");
    out += buf;
  }
  if (any_from_trace)
    out += "* peaks from the trace (allocated: the blocks it recorded; reserved: its segment events)\n";
  if (report.max_peak_rank() >= 0) {
    const RankFacts& hi = report.rank(report.max_peak_rank());
    const RankFacts& lo = report.rank(report.min_peak_rank());
    const double ratio = report.imbalance();
    char times[48];
    std::snprintf(times, sizeof times, "%.3fx", ratio);
    std::snprintf(buf, sizeof buf, "imbalance: largest peak allocated %s on rank %d, smallest %s on rank %d (%s)\n",
                  size(hi.peak_allocated_bytes).c_str(), hi.rank, size(lo.peak_allocated_bytes).c_str(), lo.rank,
                  std::isinf(ratio) ? "the smallest allocated nothing" : times);
    out += buf;
    if (!report.imbalance_site().empty()) out += "  most of the difference: " + report.imbalance_site() + "\n";
  }
  out += "sites whose peak differs across ranks:\n";
  if (report.differing_sites().empty()) out += "  (none: every site peaks alike on every rank)\n";
  std::size_t n = 0;
  for (const SiteSpread& s : report.differing_sites()) {
    if (n++ == top) break;
    std::snprintf(buf, sizeof buf, "  %12s on rank %d .. %12s on rank %d  %s\n", format_size(s.min_bytes).c_str(),
                  s.min_rank, format_size(s.max_bytes).c_str(), s.max_rank, s.site.c_str());
    out += buf;
  }
  out += format_rank_device_memory(report);
  for (const std::string& p : report.problems()) out += "problem: " + p + "\n";
  return out;
}

/// One rank's entry of the JSON report (see the file comment); also the cross-rank page's table.
inline void write_rank_facts_json(JsonWriter& w, const RankFacts& r) {
  w.begin_dict();
  w.field("rank", r.rank);
  w.field("host", r.host);
  w.field("device", r.device);
  w.field("file", r.file);
  w.field("peak_allocated_bytes", r.peak_allocated_bytes);
  w.field("peak_reserved_bytes", r.peak_reserved_bytes);
  w.field("peaks_from_trace", !r.peaks_recorded);
  w.key("external_fragmentation");
  if (r.external_fragmentation) {
    w.value(*r.external_fragmentation);
  } else {
    w.value(nullptr);
  }
  w.field("num_ooms", r.num_ooms);
  w.field("top_site", r.top_site);
  w.field("top_site_bytes", r.top_site_bytes);
  write_rank_device_memory(w, r);
  w.end_dict();
}

/// The report as one JSON object (see the file comment).
[[nodiscard]] inline std::string cross_rank_json(const CrossRankReport& report) {
  std::ostringstream os;
  JsonWriter w(os);
  w.begin_dict();
  w.key("ranks");
  w.begin_list();
  for (const RankFacts& r : report.ranks()) write_rank_facts_json(w, r);
  w.end_list();
  w.field("world_size", report.world_size());
  w.field("max_peak_rank", report.max_peak_rank());
  w.field("min_peak_rank", report.min_peak_rank());
  const bool any = report.max_peak_rank() >= 0;
  w.field("max_peak_allocated_bytes", any ? report.rank(report.max_peak_rank()).peak_allocated_bytes : 0);
  w.field("min_peak_allocated_bytes", any ? report.rank(report.min_peak_rank()).peak_allocated_bytes : 0);
  w.key("imbalance");
  if (std::isinf(report.imbalance())) {
    w.value(nullptr);  // JSON has no infinity: the smallest rank allocated nothing
  } else {
    w.value(report.imbalance());
  }
  w.field("imbalance_site", report.imbalance_site());
  w.key("differing_sites");
  w.begin_list();
  for (const SiteSpread& s : report.differing_sites()) {
    w.begin_dict();
    w.field("site", s.site);
    w.field("min_bytes", s.min_bytes);
    w.field("min_rank", s.min_rank);
    w.field("max_bytes", s.max_bytes);
    w.field("max_rank", s.max_rank);
    w.end_dict();
  }
  w.end_list();
  w.key("problems");
  w.begin_list();
  for (const std::string& p : report.problems()) w.value(p);
  w.end_list();
  w.end_dict();
  w.finish();
  return os.str();
}

GPUMEMPROF_NAMESPACE_END
