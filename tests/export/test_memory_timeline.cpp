// The memory timeline by category: torch.profiler's JSON layout (column order, coalescing of
// one microsecond, memory from before the trace), the offline page, the file writer, and
// export_memory_timeline on the default allocator.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/history/history_recorder.hpp"

using export_test::TempDir;
using gmp::DataValue;
using gmp::TraceAction;

namespace {

gmp::TraceEntry entry(TraceAction a, std::uint64_t addr, std::uint64_t size, std::int64_t t, std::string category = {}) {
  gmp::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.time_us = t;
  e.user_metadata = gmp::metadata_with_category("", category);
  return e;
}

struct Timeline {
  std::vector<std::int64_t> times;
  std::vector<std::vector<std::int64_t>> sizes;
};

Timeline json_timeline(const gmp::Snapshot& s, int device = 0) {
  std::ostringstream os;
  gmp::write_memory_timeline_json(s, device, os);
  const DataValue doc = gmp::parse_json(os.str());
  REQUIRE(doc.items().size() == 2);
  Timeline t;
  for (const DataValue& v : doc.items()[0].items()) t.times.push_back(v.as_int());
  for (const DataValue& row : doc.items()[1].items()) {
    t.sizes.emplace_back();
    for (const DataValue& v : row.items()) t.sizes.back().push_back(v.as_int());
  }
  return t;
}

}  // namespace

TEST_CASE("memory timeline JSON: torch.profiler's column order, one row per microsecond") {
  gmp::Snapshot s;
  const char* order[] = {"parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail"};
  std::vector<gmp::TraceEntry> trace;
  // One category per microsecond (sizes 1, 2, 4, ...), then a user category and an untagged one
  // in the same microsecond, then frees.
  for (int i = 0; i < 7; ++i) trace.push_back(entry(TraceAction::alloc, 0x1000 * (i + 1), 1u << i, 100 + i, order[i]));
  trace.push_back(entry(TraceAction::alloc, 0x9000, 1000, 200, "kv_cache"));
  trace.push_back(entry(TraceAction::segment_alloc, 0x100000, 2 << 20, 200));
  trace.push_back(entry(TraceAction::alloc, 0xa000, 24, 200));
  trace.push_back(entry(TraceAction::free_requested, 0x5000, 16, 300, "activation"));
  trace.push_back(entry(TraceAction::free_completed, 0x5000, 16, 301, "activation"));  // no row of its own
  s.device_traces = {trace};
  const Timeline t = json_timeline(s);
  CHECK(t.times == std::vector<std::int64_t>{100, 101, 102, 103, 104, 105, 106, 200, 300});
  REQUIRE(t.sizes.size() == 9);
  for (const auto& row : t.sizes) {
    REQUIRE(row.size() == 9);
    CHECK(row[0] == 0);
  }
  CHECK(t.sizes[0] == std::vector<std::int64_t>{0, 1, 0, 0, 0, 0, 0, 0, 0});
  CHECK(t.sizes[6] == std::vector<std::int64_t>{0, 1, 2, 4, 8, 16, 32, 64, 0});
  CHECK(t.sizes[7] == std::vector<std::int64_t>{0, 1, 2, 4, 8, 16, 32, 64, 1024});  // kv_cache + untagged: unknown
  CHECK(t.sizes[8] == std::vector<std::int64_t>{0, 1, 2, 4, 8, 0, 32, 64, 1024});
}

TEST_CASE("memory timeline JSON: memory from before the trace is a first row at the first time") {
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x2000, 300, 50, "gradient"),
                      entry(TraceAction::free_requested, 0x1000, 1000, 50, "parameter")}};
  s.segments.push_back({0, 0x1000, 4096, 300, 300, 300, 0, false, false, nullptr,
                        {{0x1000, 1024, 0, gmp::BlockState::inactive, nullptr},
                         {0x1400, 512, 300, gmp::BlockState::active_allocated, nullptr},
                         {0x1600, 2560, 0, gmp::BlockState::inactive, nullptr}}});
  const Timeline t = json_timeline(s);
  // As torch: the pre-existing row takes the earliest time, and the events at it get their own row.
  CHECK(t.times == std::vector<std::int64_t>{50, 50});
  CHECK(t.sizes[0] == std::vector<std::int64_t>{0, 1000, 0, 0, 0, 0, 0, 0, 0});
  CHECK(t.sizes[1] == std::vector<std::int64_t>{0, 0, 0, 0, 0, 0, 300, 0, 0});
}

TEST_CASE("memory timeline JSON: a device without a trace gives two empty lists") {
  gmp::Snapshot s;
  std::ostringstream os;
  gmp::write_memory_timeline_json(s, 3, os);
  const DataValue doc = gmp::parse_json(os.str());
  REQUIRE(doc.items().size() == 2);
  CHECK(doc.items()[0].items().empty());
  CHECK(doc.items()[1].items().empty());
}

TEST_CASE("memory timeline HTML: one area per category, bands for ranges and steps, escaped") {
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x1000, 4096, 1000, "parameter"),
                      entry(TraceAction::alloc, 0x2000, 8192, 2000, "<kv&cache>"),
                      entry(TraceAction::alloc, 0x3000, 100, 3000),
                      entry(TraceAction::free_requested, 0x2000, 8192, 4000, "<kv&cache>")}};
  s.external_annotations = {{"step 1", true, 0, 1000},  {"forward", true, 0, 1500}, {"forward", false, 0, 2500},
                            {"step 1", false, 0, 3500}, {"optimizer", true, 0, 3600}};
  std::ostringstream os;
  gmp::write_memory_timeline_html(s, 0, os, "Run <1>");
  const std::string page = os.str();
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<title>Run &lt;1&gt;</title>") != std::string::npos);
  CHECK(page.find("data-category=\"parameter\"") != std::string::npos);
  CHECK(page.find("data-category=\"&lt;kv&amp;cache&gt;\"") != std::string::npos);
  CHECK(page.find("data-category=\"unknown\"") != std::string::npos);
  CHECK(page.find("<kv&cache>") == std::string::npos);
  CHECK(page.find("class=\"band step\"") != std::string::npos);
  CHECK(page.find(">forward</text>") != std::string::npos);
  CHECK(page.find(">optimizer</text>") != std::string::npos);  // still open at the end: drawn to it
  CHECK(gmp::detail::names_a_step("ProfilerStep#3"));
  CHECK(gmp::detail::names_a_step("train_step"));
  CHECK_FALSE(gmp::detail::names_a_step("Optimizer.step#SGD.step"));
  CHECK_FALSE(gmp::detail::names_a_step("forward"));
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http") == std::string::npos);  // nothing to fetch
}

TEST_CASE("memory timeline HTML: the time axis's five ticks differ, in a unit that fits the span") {
  // A short loop: 40 microseconds in all (ticks once read "0.0 ms" five times).
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x1000, 4096, 1000), entry(TraceAction::alloc, 0x2000, 4096, 1020),
                      entry(TraceAction::free_requested, 0x2000, 4096, 1040)}};
  std::ostringstream os;
  gmp::write_memory_timeline_html(s, 0, os, "short");
  const std::string page = os.str();
  for (const char* tick : {">0 us<", ">10 us<", ">20 us<", ">30 us<", ">40 us<"}) {
    INFO(tick);
    CHECK(page.find(tick) != std::string::npos);
  }
  CHECK(gmp::detail::time_tick(0, 3'000'000) == "0.00 s");
  CHECK(gmp::detail::time_tick(750'000, 3'000'000) == "0.75 s");
  CHECK(gmp::detail::time_tick(1250, 5000) == "1.2 ms");
  CHECK(gmp::detail::time_tick(0.25, 1) == "0.25 us");
}

TEST_CASE("memory timeline files: by extension, atomically; anything else is refused") {
  TempDir dir;
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x1000, 4096, 1000, "input")}};
  gmp::write_memory_timeline_file(s, 0, dir.file("t.json"));
  gmp::write_memory_timeline_file(s, 0, dir.file("t.html"));
  CHECK(gmp::parse_json(gmp::read_file(dir.file("t.json"))).items()[0].items()[0].as_int() == 1000);
  CHECK(gmp::read_file(dir.file("t.html")).find("data-category=\"input\"") != std::string::npos);
  CHECK_THROWS_AS(gmp::write_memory_timeline_file(s, 0, dir.file("t.png")), gmp::ConfigError);
  CHECK_THROWS_AS(gmp::write_memory_timeline_file(s, 0, dir.file("missing/t.json")), gmp::IoError);
}

TEST_CASE("export_memory_timeline: the default allocator's history by category") {
  const gmp::Device dev("sim:5");
  gmp::record_memory_history({}, dev);
  auto& a = gmp::default_allocator(dev);
  void* p = nullptr;
  void* q = nullptr;
  {
    auto tag = gmp::memory_category(gmp::category::optimizer_state);
    p = a.allocate(3000);
  }
  {
    auto tag = gmp::memory_category(gmp::category::activation);
    q = a.allocate(5000);
    a.deallocate(p);  // leaves optimizer_state, not activation
  }
  TempDir dir;
  gmp::export_memory_timeline(dir.file("t.json"), dev);
  a.deallocate(q);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, dev);
  const DataValue doc = gmp::parse_json(gmp::read_file(dir.file("t.json")));
  const auto& rows = doc.items()[1].items();
  REQUIRE_FALSE(rows.empty());
  std::int64_t peak_optimizer = 0, peak_activation = 0;
  for (const DataValue& r : rows) {
    peak_optimizer = std::max(peak_optimizer, r.items()[2].as_int());
    peak_activation = std::max(peak_activation, r.items()[5].as_int());
  }
  CHECK(peak_optimizer == 3000);
  CHECK(peak_activation == 5000);
  CHECK(rows.back().items()[2].as_int() == 0);
  CHECK(rows.back().items()[5].as_int() == 5000);
}
