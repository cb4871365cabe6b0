// Analysis layer: one report across the ranks of a multi-process run, built from one snapshot per
// rank (integrations/mpi.hpp's dump_snapshots, gpumemprof_torch.dump_snapshots, or PyTorch's own
// per-rank pickles). Streaming: a rank's snapshot is reduced to its RankFacts (a few numbers and
// its per-site peaks) as soon as it is read, so a report over 64 ranks holds one snapshot at a time.
//
//   CrossRankReport report;
//   for (each file) report.add(rank_facts(load_compact_snapshot(file), file));   // or add_problem()
//   report.finish();   // ranks in order, imbalance, sites that differ, missing ranks
//
// Per rank: peak allocated and reserved bytes (the allocator's own peaks when the rank file
// carries them, else what its trace recorded, in one pass: the block bytes its allocations took
// and the bytes of its segment events), fragmentation at the end, OOMs, and the allocation site (the user's
// frame, analysis/user_frame.hpp) with the highest peak of requested bytes; and the device's
// memory at the dump when the file carries its ledger (external bytes by owner: NCCL's share).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/analysis/memory_diff.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/analysis/rank_budget.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// What one rank's snapshot says (bytes unless noted). Without recorded peaks and with a trace whose
/// start cannot be rebuilt, the peak allocated is the bytes at the end (a lower bound).
struct RankFacts {
  int rank = -1;
  std::int64_t world_size = 0;  ///< 0: the file does not say
  std::string host;             ///< "" when the file does not say
  std::string device;
  std::string file;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  bool peaks_recorded = false;                   ///< from the allocator's stats (else from the trace)
  std::optional<double> external_fragmentation;  ///< at the end; none when nothing is free
  std::int64_t num_ooms = 0;
  std::string top_site;  ///< "" when the snapshot has no allocations
  std::uint64_t top_site_bytes = 0;
  std::map<std::string, std::uint64_t> site_peaks;  ///< site -> its peak of requested bytes
  /// The rank's device at the dump, all of it (used, reserved, external by owner, context, code,
  /// unattributed); none when the file carries no device ledger (PyTorch's own snapshots).
  std::optional<DeviceMemory> device_memory;
};

/// The facts of one rank's snapshot. `rank` is used when the file carries no rank (-1: none).
template <SnapshotLike S>
[[nodiscard]] RankFacts rank_facts(const S& snap, std::string file, int rank = -1) {
  RankFacts f;
  f.file = std::move(file);
  const RankInfo& info = snap.rank_info;
  f.rank = info.known() ? static_cast<int>(info.rank) : rank;
  f.world_size = info.known() ? info.world_size : 0;
  f.host = info.host;
  f.device = info.device;
  SegmentFacts end;
  for (const SnapshotSegment& seg : snap.segments) end += segment_facts(seg);
  f.external_fragmentation = end.external_fragmentation();

  const MemoryUsage usage = usage_from_snapshot(snap);
  for (const auto& [site, counts] : usage.sites) {
    f.site_peaks[site] = counts.peak_requested_bytes;
    if (counts.peak_requested_bytes > f.top_site_bytes) {
      f.top_site_bytes = counts.peak_requested_bytes;
      f.top_site = site;
    }
  }
  if (info.peak_allocated_bytes >= 0 && info.peak_reserved_bytes >= 0) {
    f.peaks_recorded = true;
    f.peak_allocated_bytes = info.peak_allocated_bytes;
    f.peak_reserved_bytes = info.peak_reserved_bytes;
  } else {
    // What the trace says happened (no replay): the block bytes it recorded and its segment
    // bytes, summed over its devices (a rank's file has one); never below the end state.
    f.peak_allocated_bytes = std::max(static_cast<std::int64_t>(end.allocated),
                                      static_cast<std::int64_t>(usage.total.peak_allocated_bytes.value_or(0)));
    f.peak_reserved_bytes =
        std::max(static_cast<std::int64_t>(end.reserved), static_cast<std::int64_t>(usage.total.peak_reserved_bytes));
  }
  for (const DeviceMemory& m : snap.device_memory) {  // the rank's device; else the first listed
    if (!f.device_memory || m.device == f.device) f.device_memory = m;
  }
  if (info.num_ooms >= 0) {
    f.num_ooms = info.num_ooms;
  } else {
    for (const auto& trace : snap.device_traces) {
      for (const auto& e : trace) f.num_ooms += e.action == TraceAction::oom ? 1 : 0;
    }
  }
  return f;
}

/// A site whose peak differs across ranks (a rank without it counts 0 bytes).
struct SiteSpread {
  std::string site;
  std::uint64_t min_bytes = 0;
  int min_rank = -1;
  std::uint64_t max_bytes = 0;
  int max_rank = -1;
  [[nodiscard]] std::uint64_t spread() const noexcept { return max_bytes - min_bytes; }
};

/// The report over every rank (see the file comment).
class CrossRankReport {
 public:
  /// Adds a rank. A second file claiming a rank already added is a problem; the first stays.
  void add(RankFacts facts) {
    for (const RankFacts& r : ranks_) {
      if (r.rank == facts.rank) {
        add_problem(facts.file + ": rank " + std::to_string(facts.rank) + " again (already read from " + r.file +
                    "); one file per rank, from one run");
        return;
      }
    }
    ranks_.push_back(std::move(facts));
  }
  /// A file that could not be used (unreadable, corrupt): one line naming it.
  void add_problem(std::string line) { problems_.push_back(std::move(line)); }

  /// Orders the ranks, checks world sizes and missing ranks, and finds the imbalance and the
  /// sites that differ. `top_sites` bounds the differing sites kept.
  void finish(std::size_t top_sites = 20) {
    std::sort(ranks_.begin(), ranks_.end(), [](const RankFacts& a, const RankFacts& b) { return a.rank < b.rank; });
    check_world_size();
    if (ranks_.empty()) return;
    const auto by_peak = [](const RankFacts& a, const RankFacts& b) {
      return a.peak_allocated_bytes < b.peak_allocated_bytes;
    };
    max_rank_ = std::max_element(ranks_.begin(), ranks_.end(), by_peak)->rank;  // first of equals
    min_rank_ = std::min_element(ranks_.begin(), ranks_.end(), by_peak)->rank;
    find_differing_sites(top_sites);
  }

  [[nodiscard]] const std::vector<RankFacts>& ranks() const noexcept { return ranks_; }
  [[nodiscard]] const std::vector<std::string>& problems() const noexcept { return problems_; }
  [[nodiscard]] std::int64_t world_size() const noexcept { return world_size_; }
  [[nodiscard]] const RankFacts& rank(int r) const {
    for (const RankFacts& f : ranks_) {
      if (f.rank == r) return f;
    }
    throw std::out_of_range("no rank " + std::to_string(r) + " in the report");
  }
  /// The ranks with the largest and smallest peak allocated bytes (-1 without ranks).
  [[nodiscard]] int max_peak_rank() const noexcept { return max_rank_; }
  [[nodiscard]] int min_peak_rank() const noexcept { return min_rank_; }
  /// Largest / smallest peak allocated bytes (rank_budget.hpp's peak_imbalance).
  [[nodiscard]] double imbalance() const {
    if (ranks_.empty()) return 1.0;
    return peak_imbalance(rank(max_rank_).peak_allocated_bytes, rank(min_rank_).peak_allocated_bytes);
  }
  /// The site whose peak differs most between the largest and the smallest rank ("" if none).
  [[nodiscard]] const std::string& imbalance_site() const noexcept { return imbalance_site_; }
  /// Sites whose peak differs across ranks, largest spread first.
  [[nodiscard]] const std::vector<SiteSpread>& differing_sites() const noexcept { return sites_; }

 private:
  void check_world_size() {
    std::map<std::int64_t, std::size_t> votes;
    for (const RankFacts& r : ranks_) {
      if (r.world_size > 0) ++votes[r.world_size];
    }
    if (votes.empty()) {
      world_size_ = static_cast<std::int64_t>(ranks_.size());
      return;
    }
    // The world size most files agree on; the others are from another run (or a bad launch).
    world_size_ = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
                    return a.second < b.second;
                  })->first;
    for (const RankFacts& r : ranks_) {
      if (r.world_size > 0 && r.world_size != world_size_) {
        add_problem(r.file + ": world size " + std::to_string(r.world_size) + ", but " +
                    std::to_string(votes[world_size_]) + " file(s) say " + std::to_string(world_size_) +
                    " (files from different runs?)");
      }
    }
    std::set<int> present;
    for (const RankFacts& r : ranks_) present.insert(r.rank);
    std::string missing;  // runs of missing ranks as ranges: "1, 3-63"
    for (std::int64_t r = 0; r < world_size_; ++r) {
      if (present.count(static_cast<int>(r)) != 0) continue;
      std::int64_t last = r;
      while (last + 1 < world_size_ && present.count(static_cast<int>(last + 1)) == 0) ++last;
      missing += (missing.empty() ? "" : ", ") + std::to_string(r) + (last > r ? "-" + std::to_string(last) : "");
      r = last;
    }
    if (!missing.empty()) {
      add_problem("missing rank(s) " + missing + " of world size " + std::to_string(world_size_) +
                  ": no readable file for them");
    }
  }

  void find_differing_sites(std::size_t top) {
    std::set<std::string> names;
    for (const RankFacts& r : ranks_) {
      for (const auto& [site, bytes] : r.site_peaks) names.insert(site);
    }
    const auto bytes_of = [](const RankFacts& r, const std::string& site) -> std::uint64_t {
      const auto it = r.site_peaks.find(site);
      return it == r.site_peaks.end() ? 0 : it->second;
    };
    const RankFacts& hi = rank(max_rank_);
    const RankFacts& lo = rank(min_rank_);
    std::int64_t best = 0;
    for (const std::string& site : names) {
      SiteSpread s{site, std::numeric_limits<std::uint64_t>::max(), -1, 0, -1};
      for (const RankFacts& r : ranks_) {
        const std::uint64_t b = bytes_of(r, site);
        if (b < s.min_bytes) {
          s.min_bytes = b;
          s.min_rank = r.rank;
        }
        if (b > s.max_bytes || s.max_rank < 0) {
          s.max_bytes = b;
          s.max_rank = r.rank;
        }
      }
      if (s.spread() != 0) sites_.push_back(s);
      const std::int64_t between =
          static_cast<std::int64_t>(bytes_of(hi, site)) - static_cast<std::int64_t>(bytes_of(lo, site));
      if (between > best) {
        best = between;
        imbalance_site_ = site;
      }
    }
    std::stable_sort(sites_.begin(), sites_.end(),
                     [](const SiteSpread& a, const SiteSpread& b) { return a.spread() > b.spread(); });
    if (sites_.size() > top) sites_.resize(top);
  }

  std::vector<RankFacts> ranks_;
  std::vector<std::string> problems_;
  std::int64_t world_size_ = 0;
  int max_rank_ = -1;
  int min_rank_ = -1;
  std::string imbalance_site_;
  std::vector<SiteSpread> sites_;
};

GPUMEMPROF_NAMESPACE_END
