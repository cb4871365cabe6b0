// Categories set on live allocations (set_category, as gpumemprof_torch.categorize does) travel in
// the snapshot beside the trace: the timeline of the snapshot then equals what category_stats()
// counted, at the end and at each moment a snapshot was taken, through a pickle or JSON round trip
// and in slices cut before, across and after the changes.
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/snapshot_slice.hpp"
#include "history/history_util.hpp"

namespace {

using ByCategory = std::map<std::string, std::int64_t>;

/// A category vector of a timeline as name -> bytes, zeros left out, "" named "unknown".
template <class S>
ByCategory named_levels(const gmp::TraceTimeline<S>& t, const std::vector<std::int64_t>& v) {
  ByCategory out;
  for (std::size_t c = 0; c < v.size(); ++c) {
    if (v[c] != 0) out[c == 0 ? gmp::category::unknown : t.categories()[c]] = v[c];
  }
  return out;
}

/// The ledger's current (or peak) bytes, zeros left out; requested and allocated must agree
/// (every size below is a whole block: a multiple of 512 bytes that splits its free block).
ByCategory ledger_levels(const gmp::CategoryLedger& ledger, bool peak) {
  ByCategory out;
  for (const auto& [name, s] : ledger.stats()) {
    CHECK((peak ? s.peak : s.current) == (peak ? s.allocated_peak : s.allocated_current));
    if ((peak ? s.peak : s.current) != 0) out[name] = peak ? s.peak : s.current;
  }
  return out;
}

/// The categories after each `snapshot` entry of the trace (the moments snapshots were taken).
template <class S>
std::vector<ByCategory> at_snapshots(const gmp::TraceTimeline<S>& t) {
  std::vector<ByCategory> out;
  t.walk([&](std::size_t, const auto& e, const gmp::TimelineLevels&, const std::vector<std::int64_t>& c) {
    if (e.action == gmp::TraceAction::snapshot) out.push_back(named_levels(t, c));
  });
  return out;
}

/// The categories after every entry.
template <class S>
std::vector<ByCategory> after_each(const gmp::TraceTimeline<S>& t) {
  std::vector<ByCategory> out;
  t.walk([&](std::size_t, const auto&, const gmp::TimelineLevels&, const std::vector<std::int64_t>& c) {
    out.push_back(named_levels(t, c));
  });
  return out;
}

/// The workload: allocations made untagged, then tagged while live, then some freed; a snapshot
/// (and the ledger's figures) at three moments and at the end.
struct TaggedLater {
  TaggedLater() {
    ledger.attach(rec.a());
    auto& a = rec.a();
    const auto id = [](const char* name) { return gmp::detail::MetadataStrings::instance().intern(name); };
    void* w1 = a.allocate(4096);
    void* w2 = a.allocate(3 * MiB);
    void* g = a.allocate(8192);
    void* act = nullptr;
    {
      auto tag = gmp::memory_category(gmp::category::activation);
      act = a.allocate(1 * MiB);
    }
    moment();
    REQUIRE(a.set_category(w1, id(gmp::category::parameter)));
    REQUIRE(a.set_category(w2, id(gmp::category::parameter)));
    REQUIRE(a.set_category(g, id(gmp::category::gradient)));
    moment();
    a.deallocate(w1);
    a.deallocate(act);
    moment();
    void* s = nullptr;
    {
      auto tag = gmp::memory_category(gmp::category::optimizer_state);
      s = a.allocate(2 * MiB);
    }
    REQUIRE(a.set_category(s, id(gmp::category::parameter)));  // a tagged one moves too
    a.deallocate(s);  // parameter's peak is only between the change and this free
    a.validate();
    final_snapshot = gmp::snapshot(a);
    end = ledger_levels(ledger, false);
    peaks = ledger_levels(ledger, true);
  }
  void moment() {
    (void)gmp::snapshot(rec.a());  // a `snapshot` entry marks the moment in the trace
    moments.push_back(ledger_levels(ledger, false));
  }

  Recorded rec;
  gmp::CategoryLedger ledger;  // after the allocator and recorder: detached first
  std::vector<ByCategory> moments;
  gmp::Snapshot final_snapshot;
  ByCategory end;
  ByCategory peaks;
};

/// The snapshot's timeline equals the ledger at each moment, at the end and in its peaks.
template <class S>
void check_against_ledger(const S& snap, const TaggedLater& w) {
  const gmp::TraceTimeline<S> t(snap, 0);
  std::vector<ByCategory> seen = at_snapshots(t);
  REQUIRE(seen.size() == w.moments.size() + 1);  // the final snapshot's own entry last
  seen.pop_back();
  CHECK(seen == w.moments);
  CHECK(named_levels(t, t.end_categories()) == w.end);
  CHECK(named_levels(t, t.category_peaks()) == w.peaks);
}

}  // namespace

TEST_CASE("Category changes: a snapshot's timeline equals category_stats at every moment") {
  const TaggedLater w;
  // The exact figures, from the workload above.
  CHECK(w.moments[0] == ByCategory{{"unknown", 4096 + 3 * MiB + 8192}, {"activation", 1 * MiB}});
  CHECK(w.moments[1] == ByCategory{{"parameter", 4096 + 3 * MiB}, {"gradient", 8192}, {"activation", 1 * MiB}});
  CHECK(w.moments[2] == ByCategory{{"parameter", 3 * MiB}, {"gradient", 8192}});
  CHECK(w.end == w.moments[2]);
  CHECK(w.peaks == ByCategory{{"unknown", 4096 + 3 * MiB + 8192},
                              {"activation", 1 * MiB},
                              {"parameter", 5 * MiB},  // the 2 MiB moved in beside the 3 MiB: only until its free
                              {"gradient", 8192},
                              {"optimizer_state", 2 * MiB}});
  const gmp::Snapshot& snap = w.final_snapshot;
  // The changes are beside the trace, never in it; the live blocks show their category now.
  REQUIRE(snap.category_changes.size() == 1);
  REQUIRE(snap.category_changes[0].size() == 4);
  const gmp::CategoryChange& first = snap.category_changes[0][0];
  CHECK(first.category == "parameter");
  CHECK(first.previous.empty());
  CHECK(first.size == 4096);
  CHECK(snap.category_changes[0][3].previous == "optimizer_state");
  for (const auto& e : snap.device_traces[0]) CHECK(e.action != gmp::TraceAction::category_change);
  CHECK(snap.device_traces[0][first.trace_index - 1].action == gmp::TraceAction::snapshot);
  ByCategory blocks;
  for (const auto& seg : snap.segments) {
    for (const auto& b : seg.blocks) {
      if (b.state == gmp::BlockState::active_allocated) blocks[b.category] += static_cast<std::int64_t>(b.requested_size);
    }
  }
  CHECK(blocks == ByCategory{{"parameter", 3 * MiB}, {"gradient", 8192}});
  check_against_ledger(snap, w);

  // torch.profiler's JSON layout shows the moves: its last row is the ledger's end.
  std::ostringstream json;
  gmp::write_memory_timeline_json(snap, 0, json);
  const gmp::DataValue doc = gmp::parse_json(json.str());
  const auto& last = doc.items()[1].items().back().items();
  CHECK(last[1].as_int() == 3 * MiB);  // parameter
  CHECK(last[6].as_int() == 8192);     // gradient
  CHECK(last[8].as_int() == 0);        // unknown

  // Without the changes the tagged-later bytes would stay unknown (what this fixes).
  gmp::Snapshot dropped = snap;
  dropped.category_changes.clear();
  const gmp::TraceTimeline<gmp::Snapshot> old(dropped, 0);
  CHECK(at_snapshots(old)[1].count("parameter") == 0);
}

TEST_CASE("Category changes survive pickle and JSON and pass the viewer's checker") {
  const TaggedLater w;
  export_test::TempDir dir;
  for (const char* name : {"tagged.pickle", "tagged.json"}) {
    const std::string path = dir.file(name);
    gmp::write_snapshot_file(w.final_snapshot, path);
    const gmp::CompactSnapshot back = gmp::load_compact_snapshot(path);
    CHECK(back.category_changes == w.final_snapshot.category_changes);
    check_against_ledger(back, w);
    const gmp::Snapshot expanded = gmp::load_snapshot(path);
    CHECK(expanded.category_changes == w.final_snapshot.category_changes);
  }
  // A change placed past its trace is refused, naming where.
  gmp::Snapshot bad = w.final_snapshot;
  bad.category_changes[0][1].trace_index = bad.device_traces[0].size() + 1;
  std::ostringstream os;
  gmp::write_snapshot(bad, os, gmp::SnapshotFormat::json);
  CHECK_THROWS_WITH(gmp::parse_snapshot(os.str(), "bad.json"),
                    Catch::Matchers::ContainsSubstring("bad.json: category_changes[0][1].trace_index: "));

  const std::string checker = export_test::check_snapshot_script();
  REQUIRE(export_test::have_python());
  std::string out;
  const std::string path = dir.file("tagged.pickle");
  const int rc = export_test::run_python(export_test::read_bytes(checker), {path}, &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("Slices before, across and after category changes keep every category level") {
  const TaggedLater w;
  gmp::Snapshot snap = w.final_snapshot;
  // Distinct times (10 us apart; each change 5 us before the entry it precedes) so that time
  // windows cut exactly.
  for (std::size_t i = 0; i < snap.device_traces[0].size(); ++i) snap.device_traces[0][i].time_us = 10 * static_cast<std::int64_t>(i);
  for (gmp::CategoryChange& c : snap.category_changes[0]) c.time_us = 10 * static_cast<std::int64_t>(c.trace_index) - 5;
  const gmp::TraceTimeline<gmp::Snapshot> whole(snap, 0);
  const std::vector<ByCategory> levels = after_each(whole);
  const std::size_t changed_at = snap.category_changes[0][0].trace_index;
  const std::size_t n = snap.device_traces[0].size();
  struct Window {
    std::size_t first, last;  // entries kept: [first, last)
    std::size_t changes;      // category changes kept
  };
  for (const Window win : {Window{1, changed_at, 0}, Window{changed_at - 2, changed_at + 3, 3},
                           Window{changed_at + 1, n, 1}}) {
    INFO("entries " << win.first << " to " << win.last);
    const gmp::SliceWindow cut{10 * static_cast<std::int64_t>(win.first), 10 * static_cast<std::int64_t>(win.last - 1), 0};
    gmp::SliceResult r = gmp::slice_snapshot(snap, cut);
    CHECK(r.approximate == 0);
    REQUIRE(r.snapshot.device_traces[0].size() == win.last - win.first);
    const std::size_t kept = r.snapshot.category_changes.empty() ? 0 : r.snapshot.category_changes[0].size();
    CHECK(kept == win.changes);
    // Through a pickle, as `gpumemprof slice` writes it.
    const gmp::Snapshot back = gmp::parse_snapshot(export_test::pickle_bytes(r.snapshot), "slice");
    const gmp::TraceTimeline<gmp::Snapshot> t(back, 0);
    const std::vector<ByCategory> sliced = after_each(t);
    CHECK(sliced == std::vector<ByCategory>(levels.begin() + static_cast<std::ptrdiff_t>(win.first),
                                            levels.begin() + static_cast<std::ptrdiff_t>(win.last)));
  }
}
