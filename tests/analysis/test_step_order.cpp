// Steps of a short loop: entries and annotations recorded within one microsecond share a
// time_us, so only the recorder's order (Annotation::trace_index) puts each entry in its step.
// Every reader of steps and scopes follows that order: analyze_steps (summary, html), the
// category rules' scopes (timeline), slices, and snapshots written and read back.
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/category_rules.hpp"
#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/annotations.hpp"
#include "gpumemprof/history/snapshot_slice.hpp"
#include "history/history_util.hpp"

namespace {

constexpr int kSteps = 6;

// Separate functions, so that the two allocations have two sites (the volatile keeps each call
// from becoming a tail call, which would leave the function out of the stack).
[[gnu::noinline]] void* scratch_for_step(SimAllocator& a) {
  void* volatile p = a.allocate(32 * MiB);
  return p;
}
[[gnu::noinline]] void* leak_one_mib(SimAllocator& a) {
  void* volatile p = a.allocate(1 * MiB);
  return p;
}

/// A loop as short as the allocator allows: each "step N" takes 32 MiB of scratch, keeps 1 MiB
/// it never frees, and frees the scratch; a "warmup" range before it holds nothing.
gmp::Snapshot short_loop(Recorded& r, std::vector<void*>& leaked) {
  auto& a = r.a();
  { auto warm = gmp::annotate("warmup"); }
  for (int k = 0; k < kSteps; ++k) {
    auto step = gmp::annotate("step " + std::to_string(k));
    void* tmp = scratch_for_step(a);
    leaked.push_back(leak_one_mib(a));
    a.deallocate(tmp);
  }
  return gmp::snapshot(a);
}

void check_steps(const gmp::StepReport& r) {
  REQUIRE(r.source == gmp::StepSource::annotations);
  REQUIRE(r.steps.size() == kSteps);
  for (std::size_t k = 0; k < kSteps; ++k) {
    INFO("step " << k);
    const auto held = static_cast<std::int64_t>(k * MiB);
    CHECK(r.steps[k].start_bytes == held);
    CHECK(r.steps[k].peak_bytes == held + static_cast<std::int64_t>(33 * MiB));
    CHECK(r.steps[k].end_bytes == held + static_cast<std::int64_t>(MiB));
    CHECK(r.steps[k].growth_bytes == static_cast<std::int64_t>(MiB));
  }
  REQUIRE(r.growing_sites.size() == 1);
  INFO("site: " << r.growing_sites[0].site);
  CHECK(r.growing_sites[0].site.find("leak_one_mib") != std::string::npos);
  CHECK(r.growing_sites[0].total == static_cast<std::int64_t>((kSteps - 1) * MiB));
}

}  // namespace

TEST_CASE("steps of a short loop: +1 MiB per step and the leaking site, in memory and read back") {
  Recorded r;
  std::vector<void*> leaked;
  const gmp::Snapshot s = short_loop(r, leaked);
  // The loop is short enough for its entries to share microseconds with the annotations.
  check_steps(gmp::analyze_steps(s, 0));
  for (const gmp::Annotation& a : s.external_annotations) CHECK(a.trace_index >= 0);

  std::ostringstream bytes;
  gmp::write_snapshot(s, bytes);
  const gmp::Snapshot back = gmp::parse_snapshot(bytes.str());
  check_steps(gmp::analyze_steps(back, 0));
  const auto path = temp_path("short-loop.pickle");
  gmp::write_snapshot_file(s, path.string());
  check_steps(gmp::analyze_steps(gmp::load_compact_snapshot(path.string()), 0));
  std::filesystem::remove(path);

  for (void* p : leaked) r.a().deallocate(p);
}

TEST_CASE("steps of a short loop: a slice of steps 2 to 3 keeps exactly their entries") {
  Recorded r;
  std::vector<void*> leaked;
  const gmp::Snapshot s = short_loop(r, leaked);
  const gmp::StepReport steps = gmp::analyze_steps(s, 0);
  REQUIRE(steps.steps.size() == kSteps);
  gmp::SliceWindow w;
  w.entries[0] = {steps.steps[2].first_entry, steps.steps[3].end_entry};
  const gmp::SliceResult sl = gmp::slice_snapshot(s, w);
  CHECK(sl.entries == steps.steps[2].entries + steps.steps[3].entries);
  const gmp::StepReport again = gmp::analyze_steps(sl.snapshot, 0);
  REQUIRE(again.steps.size() == 2);
  CHECK(again.steps[0].name == "step 2");
  CHECK(again.steps[0].growth_bytes == static_cast<std::int64_t>(MiB));
  CHECK(again.steps[1].growth_bytes == static_cast<std::int64_t>(MiB));
  CHECK(again.steps[1].peak_bytes == static_cast<std::int64_t>(36 * MiB));
  for (void* p : leaked) r.a().deallocate(p);
}

TEST_CASE("steps and scopes: entries of the same microsecond go by the recorder's order") {
  // One time for everything: only trace_index tells which entries each range holds.
  gmp::Snapshot s;
  s.device_traces.emplace_back();
  const auto add = [&s](gmp::TraceAction a, std::uint64_t addr, std::uint64_t size) {
    gmp::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.time_us = 1000;
    s.device_traces[0].push_back(e);
  };
  for (std::int64_t k = 0; k < 3; ++k) {
    const auto first = static_cast<std::int64_t>(s.device_traces[0].size());
    s.external_annotations.push_back({"step " + std::to_string(k), true, 0, 1000, first});
    s.external_annotations.push_back({"forward", true, 0, 1000, first});
    add(gmp::TraceAction::alloc, 0x100 + 0x10 * static_cast<std::uint64_t>(k), 100);  // kept
    add(gmp::TraceAction::alloc, 0x900, 5000);                                        // freed
    s.external_annotations.push_back({"forward", false, 0, 1000, first + 2});
    add(gmp::TraceAction::free_requested, 0x900, 5000);
    add(gmp::TraceAction::free_completed, 0x900, 5000);
    s.external_annotations.push_back({"step " + std::to_string(k), false, 0, 1000, first + 4});
  }
  const gmp::StepReport r = gmp::analyze_steps(s, 0);
  REQUIRE(r.steps.size() == 3);
  for (const gmp::StepFacts& f : r.steps) {
    CHECK(f.entries == 4);
    CHECK(f.growth_bytes == 100);
    CHECK(f.peak_bytes - f.start_bytes == 5100);
  }
  // A scope rule sees the same ranges: the allocations inside "forward" (not the frees after it).
  const gmp::CategoryRules rules = gmp::CategoryRules::parse("activation scope ^forward$\n", "rules");
  const gmp::TraceTimeline<gmp::Snapshot> timeline(s, 0, &rules);
  const std::vector<std::int64_t> peaks = timeline.category_peaks();
  const auto& names = timeline.categories();
  std::int64_t activation_peak = -1;
  for (std::size_t c = 0; c < names.size(); ++c)
    if (names[c] == "activation") activation_peak = peaks[c];
  CHECK(activation_peak == 5000 + 300);
}
