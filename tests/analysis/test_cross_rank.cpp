// The cross-rank report (analysis/cross_rank.hpp, export/reports/rank_summary.hpp), the budget
// helpers over per-rank stats (analysis/rank_budget.hpp) and the rank keys of a snapshot file.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "allocator/sim_allocator.hpp"
#include "catch.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/analysis/cross_rank.hpp"
#include "gpumemprof/analysis/rank_budget.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"

namespace gmp = gpumemprof;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

gmp::Frames stack(const std::string& function, int line) {
  return std::make_shared<const std::vector<gmp::Frame>>(std::vector<gmp::Frame>{{"train.cpp", line, function}});
}

// One segment holding two live blocks, `weights` and `activations` bytes, from two sites; the
// trace allocates both. `recorded`: the rank keys carry the allocator's peaks.
gmp::Snapshot rank_snapshot(int rank, int world, std::uint64_t weights, std::uint64_t activations,
                            bool recorded = true) {
  gmp::Snapshot s;
  const std::uint64_t base = 0x7f0000000000ULL;
  gmp::SnapshotSegment seg;
  seg.address = base;
  seg.total_size = weights + activations + 2 * kMiB;
  seg.allocated_size = seg.active_size = seg.requested_size = weights + activations;
  seg.blocks.push_back({base, weights, weights, gmp::BlockState::active_allocated, stack("load_weights", 10)});
  seg.blocks.push_back(
      {base + weights, activations, activations, gmp::BlockState::active_allocated, stack("forward", 20)});
  seg.blocks.push_back({base + weights + activations, 2 * kMiB, 0, gmp::BlockState::inactive, nullptr});
  s.segments.push_back(seg);
  s.device_traces.resize(1);
  s.device_traces[0].push_back({gmp::TraceAction::segment_alloc, base, seg.total_size, 0, 1, "N/A", "", nullptr});
  s.device_traces[0].push_back({gmp::TraceAction::alloc, base, weights, 0, 2, "N/A", "", stack("load_weights", 10)});
  s.device_traces[0].push_back(
      {gmp::TraceAction::alloc, base + weights, activations, 0, 3, "N/A", "", stack("forward", 20)});
  s.rank_info.rank = rank;
  s.rank_info.world_size = world;
  s.rank_info.host = "node" + std::to_string(rank / 2);
  s.rank_info.device = "cuda:" + std::to_string(rank % 2);
  if (recorded) {
    s.rank_info.peak_allocated_bytes = static_cast<std::int64_t>(weights + activations);
    s.rank_info.peak_reserved_bytes = static_cast<std::int64_t>(seg.total_size);
    s.rank_info.num_ooms = 0;
  }
  return s;
}

gmp::CompactSnapshot round_trip(const gmp::Snapshot& s, gmp::SnapshotFormat format = gmp::SnapshotFormat::pickle) {
  std::ostringstream os;
  gmp::write_snapshot(s, os, format);
  return gmp::parse_compact_snapshot(os.str(), "rank.pickle");
}

gmp::MemoryStats stats_with_peaks(std::int64_t allocated, std::int64_t reserved) {
  gmp::MemoryStats s;
  s.allocated_bytes[gmp::StatPool::all].peak = allocated;
  s.reserved_bytes[gmp::StatPool::all].peak = reserved;
  return s;
}

}  // namespace

TEST_CASE("rank keys survive a pickle and a JSON round trip, and are absent from plain snapshots") {
  const gmp::Snapshot s = rank_snapshot(3, 8, 16 * kMiB, 32 * kMiB);
  for (auto format : {gmp::SnapshotFormat::pickle, gmp::SnapshotFormat::json}) {
    const gmp::RankInfo r = round_trip(s, format).rank_info;
    CHECK(r.rank == 3);
    CHECK(r.world_size == 8);
    CHECK(r.host == "node1");
    CHECK(r.device == "cuda:1");
    CHECK(r.peak_allocated_bytes == static_cast<std::int64_t>(48 * kMiB));
    CHECK(r.peak_reserved_bytes == static_cast<std::int64_t>(50 * kMiB));
    CHECK(r.num_ooms == 0);
  }
  gmp::Snapshot plain = s;
  plain.rank_info = {};
  std::ostringstream os;
  gmp::write_snapshot(plain, os, gmp::SnapshotFormat::json);
  CHECK(os.str().find("\"world_size\"") == std::string::npos);
  CHECK_FALSE(round_trip(plain).rank_info.known());
}

TEST_CASE("a rank file whose world size leaves out its rank is refused, naming the key") {
  gmp::Snapshot s = rank_snapshot(4, 4, kMiB, kMiB);
  std::ostringstream os;
  gmp::write_snapshot(s, os);
  REQUIRE_THROWS_WITH(gmp::parse_compact_snapshot(os.str(), "rank-4.pickle"),
                      Catch::Matchers::Contains("rank-4.pickle: world_size: world size 4 does not include rank 4"));
}

TEST_CASE("rank facts: the allocator's peaks when recorded, else the trace's") {
  const gmp::RankFacts rec = gmp::rank_facts(round_trip(rank_snapshot(1, 2, 16 * kMiB, 32 * kMiB)), "r1.pickle");
  CHECK(rec.rank == 1);
  CHECK(rec.peaks_recorded);
  CHECK(rec.peak_allocated_bytes == static_cast<std::int64_t>(48 * kMiB));
  CHECK(rec.peak_reserved_bytes == static_cast<std::int64_t>(50 * kMiB));
  CHECK(rec.top_site == "forward at train.cpp:20");
  CHECK(rec.top_site_bytes == 32 * kMiB);
  CHECK(rec.site_peaks.at("load_weights at train.cpp:10") == 16 * kMiB);
  REQUIRE(rec.external_fragmentation.has_value());
  CHECK(*rec.external_fragmentation == 0.0);  // one free block

  gmp::Snapshot from_trace = rank_snapshot(0, 2, 16 * kMiB, 32 * kMiB, false);
  from_trace.device_traces[0].push_back({gmp::TraceAction::oom, 0, 64 * kMiB, 0, 4, "N/A", "", nullptr});
  const gmp::RankFacts tr = gmp::rank_facts(round_trip(from_trace), "r0.pickle");
  CHECK_FALSE(tr.peaks_recorded);
  CHECK(tr.peak_allocated_bytes == static_cast<std::int64_t>(48 * kMiB));  // replayed
  CHECK(tr.peak_reserved_bytes == static_cast<std::int64_t>(50 * kMiB));   // its segment_alloc
  CHECK(tr.num_ooms == 1);

  gmp::Snapshot unnamed = rank_snapshot(0, 2, kMiB, kMiB);
  unnamed.rank_info = {};
  const gmp::RankFacts un = gmp::rank_facts(round_trip(unnamed), "x.pickle", 5);
  CHECK(un.rank == 5);
  CHECK(un.world_size == 0);
  CHECK(un.host.empty());
}

TEST_CASE("the cross-rank report: imbalance, its site, and the sites that differ") {
  gmp::CrossRankReport report;
  // Added out of order: the report sorts by rank.
  report.add(gmp::rank_facts(round_trip(rank_snapshot(2, 3, 16 * kMiB, 96 * kMiB)), "rank-2.pickle"));
  report.add(gmp::rank_facts(round_trip(rank_snapshot(0, 3, 16 * kMiB, 16 * kMiB)), "rank-0.pickle"));
  report.add(gmp::rank_facts(round_trip(rank_snapshot(1, 3, 16 * kMiB, 32 * kMiB)), "rank-1.pickle"));
  report.finish();
  REQUIRE(report.ranks().size() == 3);
  CHECK(report.ranks()[0].rank == 0);
  CHECK(report.ranks()[2].rank == 2);
  CHECK(report.problems().empty());
  CHECK(report.world_size() == 3);
  CHECK(report.max_peak_rank() == 2);
  CHECK(report.min_peak_rank() == 0);
  CHECK(report.imbalance() == 112.0 / 32.0);
  CHECK(report.imbalance_site() == "forward at train.cpp:20");
  REQUIRE(report.differing_sites().size() == 1);  // load_weights is 16 MiB everywhere
  const gmp::SiteSpread& d = report.differing_sites()[0];
  CHECK(d.site == "forward at train.cpp:20");
  CHECK(d.min_bytes == 16 * kMiB);
  CHECK(d.min_rank == 0);
  CHECK(d.max_bytes == 96 * kMiB);
  CHECK(d.max_rank == 2);

  const std::string text = gmp::format_cross_rank(report);
  CHECK_THAT(text, Catch::Matchers::Contains(
                       "largest peak allocated 112.00 MiB on rank 2, smallest 32.00 MiB on rank 0 (3.500x)"));
  CHECK_THAT(text, Catch::Matchers::Contains("node1"));
  const gmp::DataValue json = gmp::parse_json(gmp::cross_rank_json(report));
  CHECK(json.find("max_peak_rank")->as_int() == 2);
  CHECK(json.find("ranks")->size() == 3);
  CHECK(json.find("ranks")->items()[1].find("peak_reserved_bytes")->as_int() == static_cast<std::int64_t>(50 * kMiB));
  CHECK(json.find("ranks")->items()[1].find("host")->as_string() == "node0");
  CHECK(json.find("imbalance")->as_double() == 3.5);
  CHECK(json.find("differing_sites")->items()[0].find("max_rank")->as_int() == 2);
}

TEST_CASE("the cross-rank report names duplicate, missing and foreign ranks, and reports the rest") {
  gmp::CrossRankReport report;
  report.add(gmp::rank_facts(round_trip(rank_snapshot(0, 4, kMiB, kMiB)), "a/rank-0.pickle"));
  report.add(gmp::rank_facts(round_trip(rank_snapshot(0, 4, kMiB, 2 * kMiB)), "b/rank-0.pickle"));
  report.add(gmp::rank_facts(round_trip(rank_snapshot(1, 4, kMiB, kMiB)), "a/rank-1.pickle"));
  report.add(gmp::rank_facts(round_trip(rank_snapshot(2, 8, kMiB, kMiB)), "c/rank-2.pickle"));
  report.add_problem("a/rank-3.pickle: not a snapshot");
  report.finish();
  CHECK(report.ranks().size() == 3);
  CHECK(report.rank(0).file == "a/rank-0.pickle");  // the first file for a rank stays
  CHECK(report.world_size() == 4);
  const auto& p = report.problems();
  REQUIRE(p.size() == 4);
  CHECK_THAT(p[0], Catch::Matchers::Contains("b/rank-0.pickle: rank 0 again (already read from a/rank-0.pickle)"));
  CHECK(p[1] == "a/rank-3.pickle: not a snapshot");
  CHECK_THAT(p[2], Catch::Matchers::Contains("c/rank-2.pickle: world size 8, but 2 file(s) say 4"));
  CHECK(p[3] == "missing rank(s) 3 of world size 4: no readable file for them");

  gmp::CrossRankReport sparse;  // runs of missing ranks read as ranges
  sparse.add(gmp::rank_facts(round_trip(rank_snapshot(2, 7, kMiB, kMiB)), "rank-2.pickle"));
  sparse.add(gmp::rank_facts(round_trip(rank_snapshot(4, 7, kMiB, kMiB)), "rank-4.pickle"));
  sparse.finish();
  REQUIRE(sparse.problems().size() == 1);
  CHECK(sparse.problems()[0] == "missing rank(s) 0-1, 3, 5-6 of world size 7: no readable file for them");
}

TEST_CASE("budget helpers over per-rank stats") {
  const std::vector<gmp::MemoryStats> ranks = {stats_with_peaks(300, 400), stats_with_peaks(100, 600),
                                               stats_with_peaks(300, 500)};
  CHECK(gmp::largest_peak(ranks) == gmp::RankPeak{0, 300});  // the lowest rank on a tie
  CHECK(gmp::smallest_peak(ranks) == gmp::RankPeak{1, 100});
  CHECK(gmp::largest_peak(ranks, gmp::PeakOf::reserved) == gmp::RankPeak{1, 600});
  CHECK(gmp::peak_imbalance(ranks) == 3.0);
  CHECK(gmp::peak_imbalance(ranks, gmp::PeakOf::reserved) == 1.5);
  CHECK_THAT(gmp::peak_imbalance(ranks), Catch::Matchers::WithinAbs(3.0, 1e-12));  // with a Catch2 matcher
  CHECK(std::isinf(gmp::peak_imbalance({stats_with_peaks(0, 0), stats_with_peaks(1, 1)})));
  CHECK(gmp::peak_imbalance({stats_with_peaks(0, 0), stats_with_peaks(0, 0)}) == 1.0);
  CHECK_THROWS_AS(gmp::largest_peak({}), std::invalid_argument);
}

TEST_CASE("each rank's device memory: NCCL's share, used beside reserved, from the rank files' ledgers") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gpumemprof-ranks-ledger-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // Two ranks on simulated devices with a 500 MiB context: NCCL's buffers (whole granules, exact)
  // and, on rank 1, a 1000-byte cuBLAS workspace that takes a 2 MiB granule (the rest unattributed).
  std::vector<std::unique_ptr<SimAllocator>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<SimAllocator>(
        gmp::SimulatedBackend(gmp::SimulatedOptions{80 * GiB, r, 2 * MiB, false, 500 * MiB})));
  }
  gmp::SimulatedBackend& sim0 = ranks[0]->backend();
  gmp::SimulatedBackend& sim1 = ranks[1]->backend();
  REQUIRE(sim0.external_malloc(180 * MiB, "libnccl.so", "ncclMemAlloc") != nullptr);
  REQUIRE(sim0.external_malloc(6 * MiB, "libnccl.so", "ncclProxyConnect") != nullptr);
  REQUIRE(sim1.external_malloc(190 * MiB, "libnccl.so", "ncclMemAlloc") != nullptr);
  REQUIRE(sim1.external_malloc(1000, "libcublas.so", "cublasCreate_v2") != nullptr);
  void* p0 = ranks[0]->allocate(100 * MiB);
  void* p1 = ranks[1]->allocate(40 * MiB);
  for (int r = 0; r < 2; ++r) (void)gmp::dump_rank_snapshot(*ranks[static_cast<std::size_t>(r)], dir.string(), r, 2);

  const gmp::CrossRankReport report = gmp::load_cross_rank({dir.string()});
  REQUIRE(report.ranks().size() == 2);
  REQUIRE(report.rank(0).device_memory.has_value());
  const gmp::DeviceMemory& m0 = *report.rank(0).device_memory;
  const gmp::DeviceMemory& m1 = *report.rank(1).device_memory;
  CHECK(m0.device == "sim:0");
  CHECK(m0.used == 786 * MiB);  // 500 context + 100 reserved + 186 NCCL
  CHECK(m0.reserved == 100 * MiB);
  CHECK(m0.external == 186 * MiB);
  REQUIRE(m0.external_by_owner.size() == 1);
  CHECK(m0.external_by_owner[0] == gmp::OwnerMemory{"libnccl.so", 186 * MiB, 2, "ncclMemAlloc", {}});
  CHECK(m0.context == 500 * MiB);
  CHECK(m0.unattributed == 0);
  CHECK(m1.used == 500 * MiB + 40 * MiB + 190 * MiB + 2 * MiB);
  CHECK(m1.external == 190 * MiB + 1000);
  CHECK(m1.unattributed == static_cast<std::int64_t>(2 * MiB - 1000));

  const std::string text = gmp::format_cross_rank(report);
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring("device memory at the dump"));
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring(
                       "    0  sim:0     786.00 MiB  100.00 MiB  186.00 MiB  500.00 MiB     0 bytes       0 bytes  "
                       "libnccl.so 186.00 MiB (ncclMemAlloc)\n"));
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring("libnccl.so 190.00 MiB (ncclMemAlloc)"));
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring(gmp::format_size(2 * MiB - 1000)));

  const gmp::DataValue json = gmp::parse_json(gmp::cross_rank_json(report));
  const gmp::DataValue& r1 = json.find("ranks")->items()[1];
  CHECK(r1.find("device_used_bytes")->as_int() == static_cast<std::int64_t>(732 * MiB));
  CHECK(r1.find("device_reserved_bytes")->as_int() == static_cast<std::int64_t>(40 * MiB));
  CHECK(r1.find("external_bytes")->as_int() == static_cast<std::int64_t>(190 * MiB + 1000));
  CHECK(r1.find("external_tracked")->as_bool());
  CHECK(r1.find("context_bytes")->as_int() == static_cast<std::int64_t>(500 * MiB));
  CHECK(r1.find("unattributed_bytes")->as_int() == static_cast<std::int64_t>(2 * MiB - 1000));
  const gmp::DataValue& owners = *r1.find("external_by_owner");
  REQUIRE(owners.size() == 2);
  CHECK(owners.items()[0].find("owner")->as_string() == "libnccl.so");
  CHECK(owners.items()[0].find("bytes")->as_int() == static_cast<std::int64_t>(190 * MiB));
  CHECK(owners.items()[1].find("owner")->as_string() == "libcublas.so");
  CHECK(owners.items()[1].find("top_site")->as_string() == "cublasCreate_v2");

  ranks[0]->deallocate(p0);
  ranks[1]->deallocate(p1);
  ranks[0]->validate();  // throws on a broken invariant
  ranks[1]->validate();
  fs::remove_all(dir);
}

TEST_CASE("rank files without a device ledger, or with tracking off, say so instead of showing zeros") {
  gmp::CrossRankReport report;
  report.add(
      gmp::rank_facts(round_trip(rank_snapshot(0, 2, kMiB, kMiB)), "rank-0.pickle"));  // PyTorch's own: no ledger
  gmp::Snapshot untracked = rank_snapshot(1, 2, kMiB, kMiB);
  gmp::DeviceMemory m;
  m.device = "cuda:1";
  m.total = 80 * GiB;
  m.used = 600 * MiB;
  m.reserved = 4 * MiB;
  m.unattributed = 596 * MiB;
  untracked.device_memory.push_back(m);
  report.add(gmp::rank_facts(round_trip(untracked), "rank-1.pickle"));
  report.finish();
  CHECK_FALSE(report.rank(0).device_memory.has_value());
  REQUIRE(report.rank(1).device_memory.has_value());
  CHECK_FALSE(report.rank(1).device_memory->tracking);

  const std::string text = gmp::format_cross_rank(report);
  CHECK_THAT(text,
             Catch::Matchers::ContainsSubstring("    0  cuda:0             ?  (the file carries no device ledger)"));
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring("(not tracked)"));
  CHECK_THAT(text, Catch::Matchers::ContainsSubstring("GPUMEMPROF_TRACK_EXTERNAL=1"));
  const gmp::DataValue json = gmp::parse_json(gmp::cross_rank_json(report));
  const gmp::DataValue& r0 = json.find("ranks")->items()[0];
  CHECK(r0.find("external_bytes")->is_none());
  CHECK(r0.find("external_by_owner")->is_none());
  const gmp::DataValue& r1 = json.find("ranks")->items()[1];
  CHECK_FALSE(r1.find("external_tracked")->as_bool());
  CHECK(r1.find("device_used_bytes")->as_int() == static_cast<std::int64_t>(600 * MiB));
  CHECK(r1.find("unattributed_bytes")->as_int() == static_cast<std::int64_t>(596 * MiB));

  gmp::CrossRankReport plain;  // no rank carries a ledger: no device section at all
  plain.add(gmp::rank_facts(round_trip(rank_snapshot(0, 1, kMiB, kMiB)), "rank-0.pickle"));
  plain.finish();
  CHECK_THAT(gmp::format_cross_rank(plain), !Catch::Matchers::ContainsSubstring("device memory at the dump"));
}

TEST_CASE("a rank file's name gives its rank: rank-<1 to 6 digits>.pickle or .json") {
  CHECK(gmp::rank_from_file_name("dump/rank-3.pickle") == 3);
  CHECK(gmp::rank_from_file_name("rank-012.json") == 12);
  CHECK(gmp::rank_from_file_name("/a/b/rank-999999.pickle") == 999999);
  for (const char* bad : {"rank-1234567.pickle", "rank-.pickle", "rank-2.txt", "xrank-2.pickle", "rank-2.pickle.tmp",
                          "rank-2a.json", "rank--1.json", "dir/rank-2.pickle/", "ranks.json"}) {
    INFO(bad);
    CHECK(gmp::rank_from_file_name(bad) == -1);
  }
}
