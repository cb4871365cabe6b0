// The offline HTML report: the model behind it (intervals, peaks, interned stacks, summary),
// the page's structure (self-contained, escaped, valid embedded JSON that decodes back to the
// model) and the atomic file write. The browser test (browser_check.py) checks the page runs.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "synthetic_snapshot.hpp"

namespace gmp = gpumemprof;
using gmp::BlockState;
using gmp::TraceAction;

namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kSeg = 0x7f0000000000ULL;

gmp::Frames frames_of(std::vector<gmp::Frame> f) {
  return std::make_shared<const std::vector<gmp::Frame>>(std::move(f));
}

gmp::TraceEntry entry(TraceAction a, std::uint64_t addr, std::uint64_t size, std::int64_t t, gmp::Frames f = nullptr) {
  gmp::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.time_us = 1'700'000'000'000'000 + t;
  e.frames = std::move(f);
  return e;
}

// A trace that exercises every case of the interval builder (event index: what happens):
//   0 segment_alloc   1 alloc A   2 alloc B   3/4 free A   5/6 free C (allocated before the trace)
//   7 free_completed D (free requested before the trace)   8 alloc E (same stack as A, another list)
//   9 free_requested E (still pending at the end)   10 oom
// The segment then holds B (allocated), E (pending free), G (allocated before the trace, never in
// it) and a free block.
gmp::Snapshot hand_made_snapshot() {
  const gmp::Frames f1 = frames_of({{"model.cpp", 10, "Linear::forward"}, {"train.cpp", 5, "main"}});
  const gmp::Frames f2 = frames_of({{"model.cpp", 10, "Linear::forward"}, {"train.cpp", 5, "main"}});
  const gmp::Frames f3 = frames_of({{"init.cpp", 3, "load_weights"}});
  const std::uint64_t A = kSeg + 4096, B = kSeg, E = kSeg + 512, G = kSeg + 1024, C = 0x1000, D = 0x2000;
  gmp::Snapshot s;
  s.device_traces.resize(1);
  auto& t = s.device_traces[0];
  t.push_back(entry(TraceAction::segment_alloc, kSeg, 20 * kMiB, 0, f1));
  t.push_back(entry(TraceAction::alloc, A, 100, 10, f1));
  t.push_back(entry(TraceAction::alloc, B, 200, 20, f1));
  t.push_back(entry(TraceAction::free_requested, A, 100, 30));
  t.push_back(entry(TraceAction::free_completed, A, 100, 40));
  t.push_back(entry(TraceAction::free_requested, C, 50, 50));
  t.push_back(entry(TraceAction::free_completed, C, 50, 60));
  t.push_back(entry(TraceAction::free_completed, D, 70, 70));
  t.push_back(entry(TraceAction::alloc, E, 300, 80, f2));
  t.push_back(entry(TraceAction::free_requested, E, 300, 90));
  t.push_back(entry(TraceAction::oom, 1234, 64 * kMiB, 95));
  gmp::SnapshotSegment seg;
  seg.address = kSeg;
  seg.total_size = 20 * kMiB;
  seg.blocks = {{B, 512, 200, BlockState::active_allocated, f1},
                {E, 512, 300, BlockState::active_pending_free, f2},
                {G, 1024, 1000, BlockState::active_allocated, f3},
                {kSeg + 2048, 20 * kMiB - 2048, 0, BlockState::inactive, nullptr}};
  s.segments.push_back(seg);
  s.external_annotations.push_back({"forward", true, 0, 1'700'000'000'000'000 + 15});
  s.external_annotations.push_back({"forward", false, 0, 1'700'000'000'000'000 + 85});
  return s;
}

// The JSON the page embeds.
std::string embedded_json(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"gmp-data\">";
  const auto a = html.find(open);
  REQUIRE(a != std::string::npos);
  const auto b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return html.substr(a + open.size(), b - a - open.size());
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

std::vector<std::int64_t> ints(const gmp::DataValue& list) {
  std::vector<std::int64_t> out;
  for (const auto& v : list.items()) out.push_back(v.as_int());
  return out;
}

std::vector<std::int64_t> undelta(std::vector<std::int64_t> v) {
  for (std::size_t i = 1; i < v.size(); ++i) v[i] += v[i - 1];
  return v;
}

const gmp::DataValue& at(const gmp::DataValue& v, const char* key) {
  const gmp::DataValue* p = v.find(key);
  REQUIRE(p != nullptr);
  return *p;
}

}  // namespace

TEST_CASE("html model: allocation intervals, flags and stacks from a trace", "[html]") {
  const gmp::detail::HtmlModel m = gmp::detail::build_html_model(hand_made_snapshot());
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  REQUIRE(d.times.size() == 11);
  CHECK(d.times.front() == 0);
  CHECK(d.times.back() == 95);

  struct Want {
    std::uint64_t start, end, size;
    std::uint8_t flags;
  };
  namespace dt = gmp::detail;
  // Sorted by start; those live from state 0 keep the order they were found in.
  const std::vector<Want> want = {
      {0, 7, 50, dt::kHtmlAllocBeforeTrace},                               // C
      {0, 8, 70, dt::kHtmlAllocBeforeTrace},                               // D
      {0, 12, 1000, dt::kHtmlAllocBeforeTrace | dt::kHtmlAllocLiveAtEnd},  // G, from the segment
      {2, 5, 100, 0},                                                      // A
      {3, 12, 200, dt::kHtmlAllocLiveAtEnd},                               // B
      {9, 12, 300, dt::kHtmlAllocLiveAtEnd | dt::kHtmlAllocPendingFree},   // E
  };
  REQUIRE(d.allocations.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("allocation " << i);
    CHECK(d.allocations[i].start == want[i].start);
    CHECK(d.allocations[i].end == want[i].end);
    CHECK(d.allocations[i].size == want[i].size);
    CHECK(static_cast<int>(d.allocations[i].flags) == static_cast<int>(want[i].flags));
  }
  // A, B and E share one stack (E's list is another object with equal frames); G has its own;
  // C and D have none.
  const auto& al = d.allocations;
  CHECK(al[3].stack >= 0);
  CHECK(al[3].stack == al[4].stack);
  CHECK(al[3].stack == al[5].stack);
  CHECK(al[2].stack >= 0);
  CHECK(al[2].stack != al[3].stack);
  CHECK(al[0].stack == -1);
  CHECK(al[1].stack == -1);
  CHECK(m.stacks.stacks().size() == 2);
  CHECK(m.stacks.frames().size() == 3);

  CHECK(d.reserved_changes == std::vector<std::pair<std::uint64_t, std::int64_t>>{{1, 20 * kMiB}});
  CHECK(d.ooms == std::vector<std::uint64_t>{10});
  REQUIRE(d.annotations.size() == 2);
  CHECK(d.annotations[0].time_us == 15);
  CHECK(m.stacks.strings()[static_cast<std::size_t>(d.annotations[0].name)] == "forward");

  const auto& s = d.summary;
  CHECK(s.num_events == 11);
  CHECK(s.num_allocs == 3);
  CHECK(s.num_frees == 3);
  CHECK(s.num_ooms == 1);
  // active: 1120 at state 0, +A 1220, +B 1420, -A 1320, -C 1270, -D 1200, +E 1500
  CHECK(s.peak_requested_bytes == 1500);
  CHECK(s.peak_requested_state == 9);
  // allocated (to free_requested): C and G before the trace: 1050, +A, +B = 1350, ..., +E = 1500
  CHECK(s.peak_requested_in_use_bytes == 1500);
  // Peak allocated: block bytes by the one definition (the summary's and diff's figure).
  REQUIRE(s.peak_allocated_bytes.has_value());
  CHECK(s.peak_allocated_bytes == gmp::snapshot_peak_allocated(hand_made_snapshot(), 0));
  CHECK(*s.peak_allocated_bytes >= s.peak_requested_in_use_bytes);
  CHECK(s.reserved_start_bytes == 0);
  CHECK(s.peak_reserved_bytes == 20 * kMiB);
  CHECK(s.usage.reserved == 20 * kMiB);
  CHECK(s.num_segments == 1);
  CHECK(s.num_blocks == 4);
  CHECK(s.usage.live_blocks == 2);
  CHECK(s.usage.requested == 1200);
  CHECK(s.usage.internal_free() == (512 - 200) + (1024 - 1000));
  CHECK(s.usage.pending == 512);
  CHECK(s.usage.unallocated() == 512 + 20 * kMiB - 2048);
  CHECK(s.usage.largest_free == 20 * kMiB - 2048);
}

TEST_CASE("html model: reserved memory before a truncated trace is reconstructed", "[html]") {
  gmp::Snapshot snap;
  snap.device_traces.resize(1);
  // The snapshot holds 3 segments (60 MiB); the trace saw one more allocated and one freed.
  snap.device_traces[0].push_back(entry(TraceAction::segment_alloc, kSeg, 20 * kMiB, 0));
  snap.device_traces[0].push_back(entry(TraceAction::segment_free, kSeg + kMiB * 100, 40 * kMiB, 5));
  for (int i = 0; i < 3; ++i) {
    gmp::SnapshotSegment seg;
    seg.address = kSeg + static_cast<std::uint64_t>(i) * 32 * kMiB;
    seg.total_size = 20 * kMiB;
    seg.blocks = {{seg.address, 20 * kMiB, 0, BlockState::inactive, nullptr}};
    snap.segments.push_back(seg);
  }
  const auto m = gmp::detail::build_html_model(snap);
  const auto& s = m.devices.at(0).summary;
  CHECK(s.reserved_start_bytes == 80 * kMiB);  // 60 - 20 + 40
  CHECK(s.peak_reserved_bytes == 100 * kMiB);
  CHECK(s.usage.reserved == 60 * kMiB);
}

TEST_CASE("html model: max_trace_entries keeps the newest entries", "[html]") {
  const gmp::Snapshot snap = hand_made_snapshot();
  const auto m = gmp::detail::build_html_model(snap, 4);  // entries 7..10
  const auto& d = m.devices.at(0);
  CHECK(d.summary.num_events == 4);
  CHECK(d.summary.num_dropped_events == 7);
  CHECK(d.times.front() == 0);
  CHECK(d.t0_us == snap.device_traces[0][7].time_us);
  // D's free completes in the window; B and G are live blocks the window never allocated.
  std::uint64_t live_from_start = 0;
  for (const auto& a : d.allocations) live_from_start += a.start == 0 ? a.size : 0;
  CHECK(live_from_start == 70 + 200 + 1000);
}

TEST_CASE("html report: a snapshot without traces (segments only) renders", "[html]") {
  html_test::SyntheticOptions opt;
  opt.with_trace = false;
  const gmp::Snapshot snap = html_test::make_synthetic_snapshot(opt);
  REQUIRE(snap.device_traces.at(0).empty());
  REQUIRE(!snap.segments.empty());
  const auto m = gmp::detail::build_html_model(snap);
  const auto& d = m.devices.at(0);
  CHECK(d.times.empty());
  CHECK(d.summary.num_events == 0);
  std::uint64_t live = 0;
  for (const auto& seg : snap.segments)
    for (const auto& b : seg.blocks) live += b.state != BlockState::inactive;
  CHECK(d.allocations.size() == live);
  for (const auto& a : d.allocations) {
    CHECK(a.start == 0);
    CHECK(a.end == 1);
  }
  CHECK(d.summary.peak_reserved_bytes == d.summary.usage.reserved);
  const std::string html = gmp::render_html_report(snap);
  CHECK(html.find("\"nEvents\":0") != std::string::npos);
  CHECK_NOTHROW(gmp::parse_json(embedded_json(html)));
}

TEST_CASE("html report: a trace without frames renders", "[html]") {
  html_test::SyntheticOptions opt;
  opt.with_frames = false;
  const gmp::Snapshot snap = html_test::make_synthetic_snapshot(opt);
  const auto m = gmp::detail::build_html_model(snap);
  CHECK(m.stacks.stacks().empty());
  for (const auto& a : m.devices.at(0).allocations) CHECK(a.stack == -1);
  const gmp::DataValue data = gmp::parse_json(embedded_json(gmp::render_html_report(snap)));
  CHECK(at(data, "stacks").size() == 0);
}

TEST_CASE("html report: an empty snapshot renders", "[html]") {
  const std::string html = gmp::render_html_report(gmp::Snapshot{});
  const gmp::DataValue data = gmp::parse_json(embedded_json(html));
  CHECK(at(data, "devices").size() == 1);
}

TEST_CASE("html report: one self-contained page, nothing fetched", "[html]") {
  const gmp::Snapshot snap = html_test::make_synthetic_snapshot();
  const std::string html = gmp::render_html_report(snap, {.title = "step 42"});
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<title>step 42</title>") != std::string::npos);
  CHECK(count(html, "<script") == 2);  // the data and the inline script
  CHECK(count(html, "</script>") == 2);
  for (const char* external :
       {"http://", "https://", "src=", "<link", "@import", "url(", "fetch(", "XMLHttpRequest", "<iframe"}) {
    INFO(external);
    CHECK(html.find(external) == std::string::npos);
  }
  CHECK(html.size() < 400 * 1024);
}

TEST_CASE("html report: the embedded JSON decodes back to the model", "[html]") {
  const gmp::Snapshot snap = hand_made_snapshot();
  const auto m = gmp::detail::build_html_model(snap);
  const auto& d = m.devices.at(0);
  const gmp::DataValue data = gmp::parse_json(embedded_json(gmp::render_html_report(snap)));
  CHECK(at(data, "v").as_int() == 1);
  CHECK(at(data, "strings").size() == m.stacks.strings().size());
  CHECK(at(data, "frames").size() == 3 * m.stacks.frames().size());
  const gmp::DataValue& dev = at(data, "devices").items().at(0);
  CHECK(at(dev, "nEvents").as_int() == 11);
  CHECK(undelta(ints(at(dev, "dt"))) == std::vector<std::int64_t>(d.times.begin(), d.times.end()));
  const gmp::DataValue& a = at(dev, "alloc");
  const auto start = undelta(ints(at(a, "start")));
  const auto len = ints(at(a, "len"));
  const auto addr = undelta(ints(at(a, "addr")));
  const auto size = ints(at(a, "size"));
  REQUIRE(start.size() == d.allocations.size());
  for (std::size_t i = 0; i < start.size(); ++i) {
    CHECK(static_cast<std::uint64_t>(start[i]) == d.allocations[i].start);
    CHECK(static_cast<std::uint64_t>(start[i] + len[i]) == d.allocations[i].end);
    CHECK(static_cast<std::uint64_t>(addr[i]) == d.allocations[i].addr);
    CHECK(static_cast<std::uint64_t>(size[i]) == d.allocations[i].size);
  }
  CHECK(ints(at(a, "flags")) ==
        std::vector<std::int64_t>{0, 1, 1, 1, 2, 3, 4, 2, 5, 6});  // (index, flags) of C, D, G, B, E
  const gmp::DataValue& sum = at(dev, "summary");
  CHECK(at(sum, "peakRequested").as_int() == 1500);
  CHECK(at(sum, "peakRequestedState").as_int() == 9);
  CHECK(ints(at(at(dev, "blocks"), "state")) == std::vector<std::int64_t>{0, 1, 0, 2});
  CHECK(ints(at(at(dev, "segments"), "nblocks")) == std::vector<std::int64_t>{4});
}

TEST_CASE("html report: text is escaped for HTML and for the script element", "[html]") {
  gmp::Snapshot snap = hand_made_snapshot();
  const std::string evil = "</script><script>alert(1)</script><!-- & \"quoted\"";
  const std::string bad_utf8 = "caf\xC3\xA9 \xFF\xFE end \xE2\x82";  // stray bytes, a cut-off sequence
  snap.device_traces[0][1].frames = frames_of({{evil, 1, bad_utf8}});
  const std::string html = gmp::render_html_report(snap, {.title = "<b>a & b</b>"});
  CHECK(html.find("<title>&lt;b&gt;a &amp; b&lt;/b&gt;</title>") != std::string::npos);
  CHECK(count(html, "</script>") == 2);
  CHECK(count(html, "<script") == 2);
  CHECK(html.find("<!--") == std::string::npos);
  const gmp::DataValue data = gmp::parse_json(embedded_json(html));  // strict: valid UTF-8 only
  bool found_evil = false, found_name = false;
  for (const auto& s : at(data, "strings").items()) {
    found_evil |= s.as_string() == evil;
    found_name |= s.as_string() == "caf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD\xEF\xBF\xBD";
  }
  CHECK(found_evil);
  CHECK(found_name);
  CHECK(at(data, "title").as_string() == "<b>a & b</b>");
}

TEST_CASE("html report: written atomically; failures name the path", "[html]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("gmp-html-test-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  const gmp::Snapshot snap = hand_made_snapshot();
  const std::string path = (dir / "report.html").string();
  gmp::write_html_report(snap, path, {.title = "t"});
  {
    std::ifstream f(path, std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(got == gmp::render_html_report(snap, {.title = "t"}));
  }
  const std::string missing = (dir / "no-such-dir" / "report.html").string();
  try {
    gmp::write_html_report(snap, missing);
    FAIL("no error");
  } catch (const gmp::IoError& e) {
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
  // A directory in the way: the write fails, the directory stays, no temporary is left behind.
  fs::create_directories(dir / "taken.html");
  CHECK_THROWS_AS(gmp::write_html_report(snap, (dir / "taken.html").string()), gmp::IoError);
  CHECK(fs::is_directory(dir / "taken.html"));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 2);  // report.html and taken.html
  fs::remove_all(dir);
}

TEST_CASE("html report: a 1M-entry trace gives a compact page, quickly", "[html][large]") {
  html_test::SyntheticOptions opt;
  opt.target_events = 1'000'000;
  const gmp::Snapshot snap = html_test::make_synthetic_snapshot(opt);
  REQUIRE(snap.device_traces[0].size() >= 1'000'000);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string html = gmp::render_html_report(snap);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1M-entry report: %.1f MB in %.3f s\n", static_cast<double>(html.size()) / 1e6, secs);
  CHECK(html.size() < 60'000'000);
  // Catches accidental quadratic work, not a benchmark: unoptimised and sanitized builds run it
  // several times slower (12 s under ASan at -O0 on CI's 2 cores, 2026-11-26).
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  constexpr double kLimit = 10.0;
#else
  constexpr double kLimit = 60.0;
#endif
  CHECK(secs < kLimit);
  const gmp::DataValue data = gmp::parse_json(embedded_json(html));
  // Level of detail: at most 2^18 states and the 200000 largest allocations; the summary counts all.
  const gmp::DataValue& dev = at(data, "devices").items().at(0);
  CHECK(at(dev, "nEvents").as_int() <= (1 << 18));
  CHECK(at(at(dev, "alloc"), "size").size() == 200000);
  CHECK(at(at(dev, "lod"), "events").as_int() == static_cast<std::int64_t>(snap.device_traces[0].size()));
  CHECK(at(at(dev, "summary"), "numEvents").as_int() == static_cast<std::int64_t>(snap.device_traces[0].size()));
}

TEST_CASE("html level of detail: the most active state of each run, the largest allocations, exact sites", "[html]") {
  gmp::detail::HtmlModel m = gmp::detail::build_html_model(hand_made_snapshot());
  auto& d = m.devices.at(0);
  // Active bytes per state (see the model test): 1120 1120 1220 1420 1420 1320 1320 1270 1200 1500 1500 1500.
  // 5 states: 0, the most active of the runs 1-4, 5-8, 9-11 (3, 5, 9), and the last (11).
  gmp::detail::apply_html_level_of_detail(d, 5, 4);
  const auto& lod = d.lod;
  REQUIRE(lod.applied);
  CHECK(lod.events == 11);
  CHECK(lod.allocations == 6);
  CHECK(lod.state_event == std::vector<std::uint64_t>{0, 3, 5, 9, 11});
  CHECK(lod.active == std::vector<std::uint64_t>{1120, 1420, 1320, 1500, 1500});
  CHECK(d.times == std::vector<std::int64_t>{20, 40, 80, 95});
  // Four allocations: the three live at the peak (G, B, E), then the one covering the most bytes
  // x page states (D: 70 x 3; C: 50 x 3, A: 100 x 1), in page states, in start order.
  std::vector<std::array<std::uint64_t, 3>> got;  // start, end, size
  for (const auto& a : d.allocations) got.push_back({a.start, a.end, a.size});
  CHECK(got == std::vector<std::array<std::uint64_t, 3>>{{0, 3, 70}, {0, 5, 1000}, {1, 5, 200}, {3, 5, 300}});
  CHECK(lod.hidden == 2);
  CHECK(lod.live_at_end == 3);
  CHECK(d.reserved_changes == std::vector<std::pair<std::uint64_t, std::int64_t>>{{1, 20 * kMiB}});
  CHECK(d.ooms == std::vector<std::uint64_t>{3});
  CHECK(d.summary.peak_requested_state == 3);
  CHECK(d.summary.peak_requested_bytes == 1500);
  // Sites over all six allocations: no stack (C, D), G's, and A/B/E's.
  REQUIRE(lod.sites.size() == 3);
  const auto site = [&](std::size_t i) {  // count, total, live at the end, at the peak, largest
    const auto& x = lod.sites[i];
    return std::vector<std::uint64_t>{x.count, x.total, x.live, x.peak, x.largest};
  };
  CHECK(lod.sites[0].stack == -1);
  CHECK(site(0) == std::vector<std::uint64_t>{2, 120, 0, 0, 70});
  CHECK(site(1) == std::vector<std::uint64_t>{1, 1000, 1000, 1000, 1000});
  CHECK(site(2) == std::vector<std::uint64_t>{3, 600, 500, 500, 300});

  // The page gets it as "lod", the trace states delta-coded.
  const std::string html =
      gmp::render_html_report(hand_made_snapshot(), {.max_page_states = 5, .max_page_allocations = 4});
  const gmp::DataValue data = gmp::parse_json(embedded_json(html));
  const gmp::DataValue& dev = at(data, "devices").items().at(0);
  CHECK(at(dev, "nEvents").as_int() == 4);
  CHECK(ints(at(at(dev, "lod"), "ev")) == std::vector<std::int64_t>{0, 3, 2, 4, 2});
  CHECK(ints(at(at(dev, "lod"), "active")) == std::vector<std::int64_t>{1120, 1420, 1320, 1500, 1500});
  CHECK(ints(at(at(at(dev, "lod"), "sites"), "count")) == std::vector<std::int64_t>{2, 1, 3});
  // 0 lifts a limit; within the limits nothing changes: no "lod" at all.
  const std::string whole =
      gmp::render_html_report(hand_made_snapshot(), {.max_page_states = 0, .max_page_allocations = 0});
  CHECK(at(gmp::parse_json(embedded_json(whole)), "devices").items().at(0).find("lod") == nullptr);
  const std::string small = gmp::render_html_report(hand_made_snapshot());
  CHECK(at(gmp::parse_json(embedded_json(small)), "devices").items().at(0).find("lod") == nullptr);
}

namespace {
/// A trace of `n` alloc/free pairs, one entry every `step_us`, then one more alloc `pause_us` later.
gmp::Snapshot paced_snapshot(int n, std::int64_t step_us, std::int64_t pause_us) {
  gmp::Snapshot snap;
  snap.device_traces.resize(1);
  auto& t = snap.device_traces[0];
  std::int64_t at = 0;
  for (int i = 0; i < n; ++i) {
    t.push_back(entry(TraceAction::alloc, kSeg, 512, at));
    t.push_back(entry(TraceAction::free_requested, kSeg, 512, at += step_us));
    t.push_back(entry(TraceAction::free_completed, kSeg, 512, at += step_us));
    at += step_us;
  }
  t.push_back(entry(TraceAction::alloc, kSeg, 512, at + pause_us));
  return snap;
}
}  // namespace

TEST_CASE("html model: a mostly idle trace opens on the events axis, a busy one on time", "[html]") {
  // Busy: 200 pairs spread evenly over 1.2 s: every one of the 100 slices holds events.
  const auto busy = gmp::detail::build_html_model(paced_snapshot(200, 2000, 2000));
  CHECK(busy.devices.at(0).summary.active_slices == 100);
  CHECK_FALSE(busy.devices.at(0).summary.opens_on_events);
  // Idle: the same 200 pairs within 6 ms, then one alloc 10 s later: 2 slices of 100 hold events.
  const gmp::Snapshot idle_snap = paced_snapshot(200, 10, 10'000'000);
  const auto idle = gmp::detail::build_html_model(idle_snap);
  CHECK(idle.devices.at(0).summary.active_slices == 2);
  CHECK(idle.devices.at(0).summary.opens_on_events);
  // The boundary: events in 19 slices open on events, in 20 on time (kBusySlices).
  std::vector<std::int64_t> times;
  for (std::int64_t s = 0; s < 19; ++s) times.push_back(s * 5);  // slices 0, 5, ..., 90 of 0..99
  times.push_back(99);
  CHECK(gmp::detail::html_model::active_slices(times) == 20);
  times.erase(times.begin() + 1);
  CHECK(gmp::detail::html_model::active_slices(times) == 19);
  CHECK(gmp::detail::html_model::active_slices({}) == 0);
  CHECK(gmp::detail::html_model::active_slices({7, 7, 7}) == 0);  // no span: events axis too

  // The page gets the choice, and its script reads it for the initial axis and the note.
  const gmp::DataValue data = gmp::parse_json(embedded_json(gmp::render_html_report(idle_snap)));
  const gmp::DataValue& sum = at(at(data, "devices").items().at(0), "summary");
  CHECK(at(sum, "activeSlices").as_int() == 2);
  CHECK(at(sum, "openOnEvents").as_bool());
  const std::string page = gmp::render_html_report(idle_snap);
  CHECK(page.find("!dev.sum.openOnEvents ? 'time' : 'event'") != std::string::npos);
  CHECK(page.find("Opened on the events axis") != std::string::npos);
}
