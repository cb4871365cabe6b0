// Sites, the user's frame rule and the usage comparison behind `gpumemprof diff`.
#include <memory>
#include <vector>

#include "catch.hpp"
#include "../units.hpp"
#include "gpumemprof/analysis/memory_diff.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"

namespace gmp = gpumemprof;

namespace {

gmp::Frames stack(std::vector<gmp::Frame> frames) {
  return std::make_shared<const std::vector<gmp::Frame>>(std::move(frames));
}
}  // namespace

TEST_CASE("the user's frame skips gpumemprof, PyTorch, the C++ runtime and unknown frames") {
  const gmp::Frames s = stack({{"include/gpumemprof/allocator/caching_allocator.hpp", 10, "gpumemprof::alloc"},
                               {"/usr/include/c++/12/bits/stl_vector.h", 5, "std::vector::reserve"},
                               {"??", 0, "0x1234"},
                               {"site-packages/torch/nn/modules/module.py", 1, "forward"},
                               {"train.cpp", 42, "step"},
                               {"main.cpp", 7, "main"}});
  CHECK(gmp::user_frame_label(s) == "step at train.cpp:42");
  // All internal: the innermost frame outside gpumemprof.
  const gmp::Frames internal = stack({{"include/gpumemprof/a.hpp", 1, "gpumemprof::f"}, {"??", 0, "0x1"}});
  CHECK(gmp::user_frame_label(internal) == "0x1 in ??");
  CHECK(gmp::user_frame_label(nullptr) == "(no stack recorded)");
}

TEST_CASE("usage from a snapshot without a trace: peak is the live bytes at the end") {
  gmp::Snapshot snap;
  gmp::SnapshotSegment seg;
  seg.total_size = 20 * MiB;
  const gmp::Frames f = stack({{"train.cpp", 1, "step"}});
  seg.blocks = {{0, 4 * MiB, 3 * MiB, gmp::BlockState::active_allocated, f},
                {4 * MiB, 2 * MiB, 2 * MiB, gmp::BlockState::active_pending_free, f},
                {6 * MiB, 14 * MiB, 0, gmp::BlockState::inactive, nullptr}};
  snap.segments.push_back(seg);
  const gmp::MemoryUsage u = gmp::usage_from_snapshot(snap);
  CHECK(u.total.peak_requested_bytes == 3 * MiB);
  CHECK(u.total.peak_allocated_bytes == 4 * MiB);  // block bytes: the live block's 4 MiB
  CHECK(u.total.live_requested_bytes == static_cast<std::int64_t>(3 * MiB));
  CHECK(u.total.allocations == 1);
  REQUIRE(u.sites.size() == 1);
  CHECK(u.sites.at("step at train.cpp:1").peak_requested_bytes == 3 * MiB);
  CHECK_FALSE(u.sites.at("step at train.cpp:1").peak_allocated_bytes.has_value());  // sites: requested only
}

TEST_CASE("usage from a snapshot with a trace: peak allocated is block bytes, peak requested what was asked") {
  gmp::Snapshot snap;
  snap.device_traces.resize(1);
  auto ev = [](gmp::TraceAction a, std::uint64_t addr, std::uint64_t size) {
    gmp::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    return e;
  };
  // 1000 and 3000 requested bytes live at once: blocks of 1024 and 3072 bytes.
  snap.device_traces[0] = {ev(gmp::TraceAction::alloc, 0x1000, 1000), ev(gmp::TraceAction::alloc, 0x2000, 3000),
                           ev(gmp::TraceAction::free_completed, 0x1000, 1000),
                           ev(gmp::TraceAction::free_completed, 0x2000, 3000)};
  const gmp::MemoryUsage u = gmp::usage_from_snapshot(snap);
  CHECK(u.total.peak_requested_bytes == 4000);
  CHECK(u.total.peak_allocated_bytes == 4096);
  CHECK(u.total.peak_allocated_bytes == gmp::snapshot_peak_allocated(snap, 0));
}

TEST_CASE("diff_usage orders rows by the size of the peak change and marks new and vanished ones") {
  gmp::MemoryUsage a, b;
  auto site = [](std::uint64_t peak) {
    gmp::UsageCounts c;
    c.peak_requested_bytes = peak;
    c.allocations = 1;
    return c;
  };
  a.sites["x"] = site(10);
  a.sites["gone"] = site(3);
  b.sites["x"] = site(4);
  b.sites["new"] = site(20);
  const gmp::MemoryDiff d = gmp::diff_usage(a, b);
  REQUIRE(d.sites.size() == 3);
  CHECK(d.sites[0].key == "new");
  CHECK_FALSE(d.sites[0].in_a);
  CHECK(d.sites[0].peak_change() == 20);
  CHECK(d.sites[1].key == "x");
  CHECK(d.sites[1].peak_change() == -6);
  CHECK(d.sites[2].key == "gone");
  CHECK_FALSE(d.sites[2].in_b);
  CHECK(gmp::format_size_change(-6) == "-6 bytes");
  CHECK(gmp::format_size_change(0) == "0 bytes");
}

TEST_CASE("segment usage and the one definition of external fragmentation") {
  gmp::SnapshotSegment seg;
  seg.total_size = 20 * MiB;
  seg.blocks = {{0, 4 * MiB, 3 * MiB, gmp::BlockState::active_allocated, nullptr},
                {4 * MiB, 2 * MiB, 2 * MiB, gmp::BlockState::active_pending_free, nullptr},
                {6 * MiB, 2 * MiB, 0, gmp::BlockState::inactive, nullptr},
                {8 * MiB, 4 * MiB, 4 * MiB, gmp::BlockState::active_allocated, nullptr},
                {12 * MiB, 8 * MiB, 0, gmp::BlockState::inactive, nullptr}};
  const gmp::SegmentFacts u = gmp::segment_facts(seg);
  CHECK(u.allocated == 8 * MiB);
  CHECK(u.requested == 7 * MiB);
  CHECK(u.internal_free() == 1 * MiB);
  CHECK(u.pending == 2 * MiB);
  CHECK(u.free == 10 * MiB);
  CHECK(u.largest_free == 8 * MiB);
  CHECK(u.free_blocks == 2);
  REQUIRE(u.external_fragmentation().has_value());
  CHECK(*u.external_fragmentation() == Approx(0.2));  // 1 - 8 / 10
  CHECK(gmp::format_fraction(u.external_fragmentation()) == "20.0%");
  // Nothing live (an empty cache) or nothing free: n/a.
  gmp::SnapshotSegment cached;
  cached.total_size = 20 * MiB;
  cached.blocks = {{0, 20 * MiB, 0, gmp::BlockState::inactive, nullptr}};
  CHECK_FALSE(gmp::segment_facts(cached).external_fragmentation().has_value());
  CHECK(gmp::format_fraction(gmp::segment_facts(cached).external_fragmentation()) == "n/a");
  gmp::SnapshotSegment full;
  full.total_size = 2 * MiB;
  full.blocks = {{0, 2 * MiB, 2 * MiB, gmp::BlockState::active_allocated, nullptr}};
  CHECK_FALSE(gmp::segment_facts(full).external_fragmentation().has_value());
  gmp::Snapshot snap;
  snap.segments = {seg, cached, full};
  const gmp::SegmentFacts all = gmp::snapshot_facts(snap);
  CHECK(all.reserved == 42 * MiB);
  CHECK(all.free == 30 * MiB);
  CHECK(all.largest_free == 20 * MiB);
  CHECK(*all.external_fragmentation() == Approx(1.0 - 20.0 / 30.0));
}
