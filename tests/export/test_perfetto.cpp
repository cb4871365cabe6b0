// Perfetto/Chrome trace-event JSON: counters replayed from the trace, annotation slices,
// the Trace Event Format's structure, and python3's json module reading the file.
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"

using export_test::TempDir;
using gmp::DataValue;
using Kind = gmp::DataValue::Kind;

namespace {

DataValue perfetto_of(const gmp::Snapshot& s) {
  std::ostringstream os;
  gmp::write_perfetto(s, os);
  return gmp::parse_json(os.str());
}

// (ts, bytes) of one counter track of one process.
std::vector<std::pair<std::int64_t, std::int64_t>> counter(const DataValue& doc, const std::string& name, int pid) {
  std::vector<std::pair<std::int64_t, std::int64_t>> samples;
  for (const DataValue& e : doc.find("traceEvents")->items()) {
    if (e.find("ph")->as_string() == "C" && e.find("name")->as_string() == name && e.find("pid")->as_int() == pid) {
      samples.emplace_back(e.find("ts")->as_int(), e.find("args")->find("bytes")->as_int());
    }
  }
  return samples;
}

// Checks what the Trace Event Format requires of every event, and that B/E nest per thread.
void check_structure(const DataValue& doc) {
  REQUIRE(doc.is(Kind::dict));
  const DataValue* events = doc.find("traceEvents");
  REQUIRE(events != nullptr);
  REQUIRE(events->is(Kind::list));
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::string>> open;
  std::map<std::pair<std::string, std::int64_t>, std::int64_t> last_ts;
  for (const DataValue& e : events->items()) {
    REQUIRE(e.is(Kind::dict));
    REQUIRE(e.find("name") != nullptr);
    REQUIRE(e.find("name")->is(Kind::string));
    REQUIRE(e.find("pid")->is(Kind::integer));
    const std::string ph = e.find("ph")->as_string();
    REQUIRE((ph == "M" || ph == "C" || ph == "B" || ph == "E" || ph == "i"));
    if (ph == "M") {
      CHECK(e.find("args")->find("name")->is(Kind::string));
      continue;
    }
    REQUIRE(e.find("ts")->is(Kind::integer));
    const std::int64_t ts = e.find("ts")->as_int();
    const auto thread = std::make_pair(e.find("pid")->as_int(), e.find("tid")->as_int());
    if (ph == "C") {
      REQUIRE(e.find("args")->find("bytes")->is(Kind::integer));
      CHECK(e.find("args")->find("bytes")->as_int() >= 0);
      const auto track = std::make_pair(e.find("name")->as_string(), thread.first);
      if (last_ts.count(track) != 0) CHECK(ts > last_ts[track]);  // one sample per timestamp, in order
      last_ts[track] = ts;
    } else if (ph == "B") {
      open[thread].push_back(e.find("name")->as_string());
    } else if (ph == "E") {
      REQUIRE_FALSE(open[thread].empty());
      CHECK(open[thread].back() == e.find("name")->as_string());
      open[thread].pop_back();
    } else {
      CHECK(e.find("s")->as_string() == "p");
    }
  }
}

}  // namespace

TEST_CASE("perfetto: counters replay the trace; annotations become slices") {
  const gmp::Snapshot s = export_test::make_full_snapshot();
  const DataValue doc = perfetto_of(s);
  check_structure(doc);
  CHECK(doc.find("displayTimeUnit")->as_string() == "ms");

  const std::int64_t t0 = s.device_traces[0][0].time_us;
  // The trace explains everything the snapshot holds on device 0, so both start at 0. Requested
  // bytes leave at free_completed (PyTorch's requested_bytes), not at free_requested.
  const auto allocated = counter(doc, "requested", 0);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want_allocated = {{t0 - 1, 0},
                                                                             {t0 + 1, (2 << 20) - 3},
                                                                             {t0 + 2, (2 << 20) - 3 + 1000},
                                                                             {t0 + 6, (2 << 20) - 3 + 1000 + 512},
                                                                             {t0 + 8, (2 << 20) - 3 + 1000}};
  CHECK(allocated == want_allocated);
  const auto reserved = counter(doc, "reserved", 0);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want_reserved = {
      {t0 - 1, 0}, {t0, 20 << 20}, {t0 + 4, 22 << 20}, {t0 + 5, 20 << 20}};
  CHECK(reserved == want_reserved);
  // Device 1's trace frees a segment it never saw allocated: the counter starts high enough.
  const auto reserved1 = counter(doc, "reserved", 1);
  REQUIRE(reserved1.size() == 3);
  CHECK(reserved1[0].second == 2 << 20);
  CHECK(reserved1[1].second == 4 << 20);
  CHECK(reserved1[2].second == 2 << 20);

  std::size_t slices = 0;
  std::size_t ooms = 0;
  for (const DataValue& e : doc.find("traceEvents")->items()) {
    const std::string ph = e.find("ph")->as_string();
    if (ph == "B" || ph == "E") {
      ++slices;
      CHECK(e.find("tid")->as_int() == 1);
    }
    if (ph == "i") {
      ++ooms;
      CHECK(e.find("args")->find("device_free_bytes")->as_int() == 123456789);
    }
  }
  CHECK(slices == 3);  // train_step B/E on device 0, eval B (never ended) on device 1
  CHECK(ooms == 1);
}

TEST_CASE("perfetto: events sharing a timestamp give one sample; unmatched ENDs are dropped") {
  gmp::Snapshot s;
  const auto e = [](gmp::TraceAction a, std::uint64_t size, std::int64_t t) {
    gmp::TraceEntry x;
    x.action = a;
    x.size = size;
    x.time_us = t;
    return x;
  };
  s.device_traces = {{e(gmp::TraceAction::segment_alloc, 4096, 100), e(gmp::TraceAction::alloc, 1000, 100),
                      e(gmp::TraceAction::alloc, 24, 100), e(gmp::TraceAction::free_requested, 24, 105),
                      e(gmp::TraceAction::free_completed, 24, 105)}};
  s.segments.push_back({0,
                        0x1000,
                        4096,
                        1024,
                        1024,
                        1000,
                        0,
                        false,
                        false,
                        nullptr,
                        {{0x1000, 1024, 1000, gmp::BlockState::active_allocated, nullptr},
                         {0x1400, 3072, 0, gmp::BlockState::inactive, nullptr}}});
  s.external_annotations = {
      {"lost", false, 0, 90}, {"outer", true, 0, 100}, {"inner", true, 0, 101}, {"outer", false, 0, 104}};
  const DataValue doc = perfetto_of(s);
  check_structure(doc);
  const std::vector<std::pair<std::int64_t, std::int64_t>> want = {{99, 0}, {100, 1024}, {105, 1000}};
  CHECK(counter(doc, "requested", 0) == want);
  std::vector<std::string> slices;
  for (const DataValue& x : doc.find("traceEvents")->items()) {
    const std::string ph = x.find("ph")->as_string();
    if (ph == "B" || ph == "E") slices.push_back(ph + " " + x.find("name")->as_string());
  }
  // "lost" has no START; "outer"'s END closes "inner" too.
  CHECK(slices == std::vector<std::string>{"B outer", "B inner", "E inner", "E outer"});
}

TEST_CASE("perfetto: the file is valid JSON for python3, also for PyTorch's snapshot") {
  TempDir dir;
  const std::string ours = dir.file("ours.trace.json");
  const std::string theirs = dir.file("resnet50.trace.json");
  gmp::write_perfetto_file(export_test::make_full_snapshot(), ours);
  const gmp::Snapshot ref = gmp::load_snapshot(export_test::reference_pickle());
  gmp::write_perfetto_file(ref, theirs);
  const DataValue doc = gmp::parse_json(gmp::read_file(theirs));
  check_structure(doc);
  // PyTorch's trace covers the whole run: the replay ends at what the snapshot holds.
  const auto reserved = counter(doc, "reserved", 0);
  REQUIRE_FALSE(reserved.empty());
  CHECK(reserved.front().second == 0);
  CHECK(reserved.back().second == 3684696064LL);
  CHECK(counter(doc, "requested", 0).back().second == 68157440);

  if (!export_test::have_python()) {
    WARN("python3 not found: skipped");
    return;
  }
  for (const std::string& path : {ours, theirs}) {
    std::string out;
    const std::string cmd = "python3 -m json.tool '" + path + "' > /dev/null";
    CHECK(std::system(cmd.c_str()) == 0);
    const int rc = export_test::run_python(R"(
import json, sys
doc = json.load(open(sys.argv[1]))
events = doc['traceEvents']
assert isinstance(events, list) and events
for e in events:
    assert e['ph'] in ('M', 'C', 'B', 'E', 'i'), e
    assert isinstance(e['pid'], int) and isinstance(e['name'], str), e
    if e['ph'] != 'M':
        assert isinstance(e['ts'], (int, float)), e
    if e['ph'] == 'C':
        assert all(isinstance(v, (int, float)) for v in e['args'].values()), e
print('ok', len(events))
)",
                                           {path}, &out);
    INFO(out);
    CHECK(rc == 0);
  }
}
