// What-if replay of snapshot histories: constructed snapshots with exact numbers, truncated
// histories (seeding), OOM inference, and the PyTorch reference snapshot (3514 MiB).
#include <string>

#include "catch.hpp"
#include "../units.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"

namespace gmp = gpumemprof;

namespace {
constexpr std::uint64_t S = 0x7f0000000000;  // a recorded segment address

gmp::TraceEntry ev(gmp::TraceAction a, std::uint64_t addr, std::uint64_t size, std::uint64_t stream = 0) {
  gmp::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  return e;
}
using A = gmp::TraceAction;

gmp::Snapshot with_trace(std::vector<gmp::TraceEntry> trace) {
  gmp::Snapshot s;
  s.device_traces.push_back(std::move(trace));
  return s;
}

gmp::SnapshotReplayResult replay(const gmp::Snapshot& s, const std::string& conf = "", std::size_t capacity = 0) {
  gmp::SnapshotReplayOptions opt;
  opt.config = gmp::AllocatorConfig(conf);
  opt.capacity = capacity;
  return gmp::replay_snapshot(s, 0, opt);
}

gmp::SnapshotSegment segment(std::uint64_t addr, std::uint64_t size, std::vector<gmp::SnapshotBlock> blocks) {
  gmp::SnapshotSegment seg;
  seg.address = addr;
  seg.total_size = size;
  seg.blocks = std::move(blocks);
  return seg;
}
gmp::SnapshotBlock block(std::uint64_t addr, std::uint64_t size, gmp::BlockState st) {
  return gmp::SnapshotBlock{addr, size, st == gmp::BlockState::inactive ? 0 : size, st, nullptr};
}

// Before the trace: segment S (20 MiB) held A (4 MiB, still live at the end) and X (6 MiB at
// S+4 MiB). The trace frees X and allocates 15 MiB into the freed 16 MiB.
gmp::Snapshot mid_run_snapshot() {
  gmp::Snapshot s =
      with_trace({ev(A::free_requested, S + 4 * MiB, 6 * MiB), ev(A::free_completed, S + 4 * MiB, 6 * MiB),
                  ev(A::alloc, S + 4 * MiB, 15 * MiB), ev(A::free_requested, S + 4 * MiB, 15 * MiB),
                  ev(A::free_completed, S + 4 * MiB, 15 * MiB)});
  s.segments.push_back(segment(
      S, 20 * MiB,
      {block(S, 4 * MiB, gmp::BlockState::active_allocated), block(S + 4 * MiB, 16 * MiB, gmp::BlockState::inactive)}));
  return s;
}
}  // namespace

TEST_CASE("a block becomes reusable at free_completed, not at free_requested") {
  // A is pending (free_requested) while B is allocated: B needs its own segment. C, after
  // free_completed, takes A's block.
  const gmp::Snapshot s =
      with_trace({ev(A::segment_alloc, S, 12 * MiB), ev(A::alloc, S, 12 * MiB), ev(A::free_requested, S, 12 * MiB),
                  ev(A::segment_alloc, S + 12 * MiB, 12 * MiB), ev(A::alloc, S + 12 * MiB, 12 * MiB),
                  ev(A::free_completed, S, 12 * MiB), ev(A::alloc, S, 12 * MiB)});
  const gmp::SnapshotReplayResult r = replay(s);
  CHECK(r.events == 7);
  CHECK(r.allocs == 3);
  CHECK(r.free_requested == 1);
  CHECK(r.frees == 1);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(24 * MiB));
  CHECK(r.recorded_peak_reserved == 24 * MiB);
  CHECK(r.num_device_alloc == 2);
  CHECK(r.recorded_segment_allocs == 2);
  CHECK(r.peak_allocated == static_cast<std::int64_t>(24 * MiB));
  CHECK(r.peak_requested_bytes == 24 * MiB);
  CHECK_FALSE(r.seed.any());
  CHECK_FALSE(r.oom());
}

TEST_CASE("--config changes what the same requests reserve") {
  // A 30 MiB block, freed, then a 10 MiB request: split by default; with max_split_size 20 MiB
  // the 30 MiB block is oversize and the request needs a new segment.
  const gmp::Snapshot s = with_trace({ev(A::alloc, S, 30 * MiB), ev(A::free_requested, S, 30 * MiB),
                                      ev(A::free_completed, S, 30 * MiB), ev(A::alloc, S, 10 * MiB)});
  CHECK(replay(s).peak_reserved == static_cast<std::int64_t>(30 * MiB));
  const gmp::SnapshotReplayResult r = replay(s, "max_split_size_mb:20");
  CHECK(r.peak_reserved == static_cast<std::int64_t>(40 * MiB));
  CHECK(r.num_device_alloc == 2);
  CHECK(r.recorded_peak_reserved == 0);  // the trace recorded no segment events
}

TEST_CASE("a trace that starts mid-run is seeded from the end state") {
  // mid_run_snapshot(): the 15 MiB request fits the freed 16 MiB: no new segment.
  const gmp::Snapshot s = mid_run_snapshot();
  const gmp::SnapshotReplayResult r = replay(s);
  CHECK(r.seed.segments == 1);
  CHECK(r.seed.blocks == 2);
  CHECK(r.seed.estimated_blocks == 1);
  CHECK(r.seed.reserved_bytes == 20 * MiB);
  CHECK(r.seed.allocated_bytes == 10 * MiB);
  CHECK(r.seed.exact_layout);
  CHECK(r.recorded_peak_reserved == 20 * MiB);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(20 * MiB));
  CHECK(r.num_device_alloc == 0);
  CHECK(r.peak_allocated == static_cast<std::int64_t>(20 * MiB));  // A + the whole 16 MiB block
  CHECK(r.peak_requested_bytes == 19 * MiB);
  CHECK(r.frees == 2);
  CHECK(r.unknown_frees == 0);
}

TEST_CASE("segments the trace frees without creating them are seeded; a segment_free run is empty_cache()") {
  // Small segment T (2 MiB at S) held X (4 KiB) before the trace; the trace frees X, empty_cache()
  // returns T, and two 1 MiB requests create a new small segment at S2.
  constexpr std::uint64_t S2 = S + 64 * MiB;
  gmp::Snapshot s =
      with_trace({ev(A::free_requested, S, 4096), ev(A::free_completed, S, 4096), ev(A::segment_free, S, 2 * MiB),
                  ev(A::segment_alloc, S2, 2 * MiB), ev(A::alloc, S2, 1 * MiB), ev(A::alloc, S2 + 1 * MiB, 1 * MiB)});
  s.segments.push_back(segment(S2, 2 * MiB,
                               {block(S2, 1 * MiB, gmp::BlockState::active_allocated),
                                block(S2 + 1 * MiB, 1 * MiB, gmp::BlockState::active_allocated)}));
  s.segments.back().is_large = false;
  const gmp::SnapshotReplayResult r = replay(s);
  CHECK(r.seed.segments == 1);  // T only: S2 was created by the trace
  CHECK(r.seed.blocks == 1);
  CHECK(r.seed.exact_layout);
  CHECK(r.empty_cache_calls == 1);
  CHECK(r.recorded_peak_reserved == 2 * MiB);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(2 * MiB));
  CHECK(r.num_device_alloc == 1);
  CHECK(r.peak_allocated == static_cast<std::int64_t>(2 * MiB));
}

TEST_CASE("a recorded OOM gives the capacity; the replay says whether it happens again") {
  // 40 MiB reserved, 8 MiB free on the device: capacity 48 MiB; the 20 MiB request fails again.
  gmp::TraceEntry oom = ev(A::oom, 8 * MiB, 20 * MiB);
  const gmp::Snapshot s = with_trace({ev(A::segment_alloc, S, 40 * MiB), ev(A::alloc, S, 40 * MiB), oom});
  gmp::SnapshotReplayResult r = replay(s);
  CHECK(r.capacity == 48 * MiB);
  CHECK(r.capacity_inferred);
  CHECK(r.recorded_ooms == 1);
  CHECK(r.ooms_reproduced == 1);
  CHECK(r.ooms_avoided == 0);
  CHECK(r.oom());
  // On a larger device the request fits: the OOM is avoided.
  r = replay(s, "", 64 * MiB);
  CHECK_FALSE(r.capacity_inferred);
  CHECK(r.ooms_avoided == 1);
  CHECK(r.ooms_reproduced == 0);
  CHECK_FALSE(r.oom());
  // On a smaller one, the recorded 40 MiB allocation itself fails: a new OOM at event 1.
  r = replay(s, "", 32 * MiB);
  CHECK(r.new_ooms == 1);
  CHECK(r.first_new_oom_event == 1);
  CHECK(r.oom());
}

TEST_CASE("an alloc at a live address is a FormatError naming the event") {
  const gmp::Snapshot s = with_trace({ev(A::alloc, S, 4096), ev(A::alloc, S, 4096)});
  CHECK_THROWS_WITH(replay(s), Catch::Matchers::ContainsSubstring("device_traces[0][1]") &&
                                  Catch::Matchers::ContainsSubstring("still allocated"));
  CHECK_THROWS_AS(gmp::replay_snapshot(s, 3), std::out_of_range);
}

TEST_CASE("the PyTorch reference snapshot replays to PyTorch's 3514 MiB, also with its first 3000 events dropped") {
  const std::string path =
      std::string(std::getenv("GPUMEMPROF_SOURCE_DIR") ? std::getenv("GPUMEMPROF_SOURCE_DIR") : ".") +
      "/tests/data/resnet50_train.snapshot.pickle";
  gmp::Snapshot s = gmp::load_snapshot(path);
  gmp::SnapshotReplayResult r = gmp::replay_snapshot(s, 0);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(3514 * MiB));
  CHECK(r.recorded_peak_reserved == 3514 * MiB);
  CHECK(r.num_device_alloc == 109);
  CHECK(r.allocs == 3186);
  CHECK(r.frees == 3183);
  CHECK_FALSE(r.seed.any());

  auto& trace = s.device_traces[0];
  trace.erase(trace.begin(), trace.begin() + 3000);
  r = gmp::replay_snapshot(s, 0);
  CHECK(r.seed.segments == 109);
  CHECK(r.seed.blocks == 701);
  CHECK(r.seed.exact_layout);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(3514 * MiB));
  CHECK(r.num_device_alloc == 0);
  CHECK(r.unknown_frees == 0);
}

TEST_CASE(
    "seeding with expandable segments: --config expandable_segments seeds; recorded ones predating the trace are "
    "refused") {
  // mid_run_snapshot() replayed with expandable segments: the seeded 20 MiB segment is mapped on
  // the stream's expandable segment, A and X cut from it.
  gmp::Snapshot s = mid_run_snapshot();
  const gmp::SnapshotReplayResult r = replay(s, "expandable_segments:True");
  CHECK(r.seed.segments == 1);
  CHECK(r.seed.blocks == 2);
  CHECK(r.seed.reserved_bytes == 20 * MiB);
  CHECK(r.peak_reserved == static_cast<std::int64_t>(20 * MiB));
  // A + 15 MiB: in expandable segments a large block is split whenever 512 bytes remain (PyTorch's
  // should_split), so the 15 MiB request no longer takes the whole 16 MiB hole as it does by default.
  CHECK(r.peak_allocated == static_cast<std::int64_t>(19 * MiB));
  CHECK(r.frees == 2);
  CHECK(r.unknown_frees == 0);

  // The same history recorded in an expandable segment: what was mapped before the trace is unknown.
  s.segments.back().is_expandable = true;
  try {
    (void)replay(s);
    FAIL("a trace starting inside expandable segments was replayed");
  } catch (const gmp::FormatError& e) {
    const std::string what = e.what();
    CHECK(what.find("device_traces[0] starts mid-run") != std::string::npos);
    CHECK(what.find("expandable segments (1 at the end, 20 MiB mapped)") != std::string::npos);
    CHECK(what.find("max_entries") != std::string::npos);
  }
  // Pages unmapped that the trace never mapped tell the same.
  gmp::Snapshot unmapped = with_trace({ev(A::segment_unmap, S, 2 * MiB), ev(A::segment_map, S, 2 * MiB)});
  unmapped.segments.push_back(segment(S, 2 * MiB, {block(S, 2 * MiB, gmp::BlockState::inactive)}));
  unmapped.segments.back().is_expandable = true;
  CHECK_THROWS_AS((void)replay(unmapped), gmp::FormatError);
}

TEST_CASE("a complete trace of expandable segments replays, on either policy") {
  // The trace maps 4 MiB, allocates A (4 MiB), frees it, allocates B (2 MiB): all recorded.
  gmp::Snapshot s =
      with_trace({ev(A::segment_map, S, 4 * MiB), ev(A::alloc, S, 4 * MiB), ev(A::free_requested, S, 4 * MiB),
                  ev(A::free_completed, S, 4 * MiB), ev(A::alloc, S, 2 * MiB)});
  s.segments.push_back(segment(
      S, 4 * MiB,
      {block(S, 2 * MiB, gmp::BlockState::active_allocated), block(S + 2 * MiB, 2 * MiB, gmp::BlockState::inactive)}));
  s.segments.back().is_expandable = true;
  // PyTorch's expandable segments map the large pool in 20 MiB pages; the compacting variant in 2 MiB.
  const gmp::SnapshotReplayResult e = replay(s, "expandable_segments:True");
  CHECK_FALSE(e.seed.any());
  CHECK(e.recorded_peak_reserved == 4 * MiB);
  CHECK(e.peak_reserved == static_cast<std::int64_t>(20 * MiB));
  CHECK(e.peak_allocated == static_cast<std::int64_t>(4 * MiB));
  const gmp::SnapshotReplayResult c = replay(s, "compacting_expandable_segments:True");
  CHECK_FALSE(c.seed.any());
  CHECK(c.peak_reserved == static_cast<std::int64_t>(4 * MiB));
  CHECK(c.peak_allocated == static_cast<std::int64_t>(4 * MiB));
  const gmp::SnapshotReplayResult d = replay(s);  // the default policy: one 20 MiB segment
  CHECK_FALSE(d.seed.any());
  CHECK(d.peak_reserved == static_cast<std::int64_t>(20 * MiB));
}
