// The streaming snapshot reader: trace entries decoded as the pickle appends them (never kept as
// a value tree), the file read in chunks, and a CompactSnapshot that the reports and the replay
// read exactly as they read a Snapshot.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/pickle_reader.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"

using export_test::TempDir;
using gmp::DataValue;

namespace {

// The whole-file path: a value tree, then the decoder.
gmp::Snapshot via_tree(const std::string& bytes) { return gmp::snapshot_from_value(gmp::read_pickle(bytes)); }

template <class S>
std::string perfetto_of(const S& s) {
  std::ostringstream os;
  gmp::write_perfetto(s, os);
  return os.str();
}

template <class S>
std::string replay_of(const S& s) {
  std::string out;
  for (const int d : gmp::traced_devices(s)) {
    gmp::SnapshotReplayResult r;
    try {
      r = gmp::replay_snapshot(s, d);
    } catch (const gmp::FormatError& e) {  // e.g. a mid-run trace over expandable segments: refused alike
      out += std::to_string(d) + ": refused: " + e.what() + "\n";
      continue;
    }
    out += std::to_string(d) + ": " + std::to_string(r.events) + " " + std::to_string(r.allocs) + " " +
           std::to_string(r.frees) + " " + std::to_string(r.peak_requested_bytes) + " " +
           std::to_string(r.peak_allocated) + " " + std::to_string(r.peak_reserved) + " " +
           std::to_string(r.recorded_peak_reserved) + " " + std::to_string(r.seed.blocks) + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("snapshot stream: trace entries are handed over as appended, and the lists stay empty") {
  const gmp::Snapshot full = export_test::make_full_snapshot();  // three device traces, the last empty
  REQUIRE(full.device_traces.size() == 3);
  const std::string bytes = export_test::pickle_bytes(full);
  std::vector<std::vector<std::size_t>> seen(3);
  const gmp::PickleItemStream stream{"device_traces", [&](std::size_t list, std::size_t item, const DataValue& v) {
                                       REQUIRE(list < seen.size());
                                       CHECK(v.is(DataValue::Kind::dict));
                                       seen[list].push_back(item);
                                     }};
  const DataValue root = gmp::read_pickle(bytes, {}, &stream);
  for (std::size_t d = 0; d < 3; ++d) {
    INFO("device " << d);
    CHECK(seen[d].size() == full.device_traces[d].size());
    for (std::size_t k = 0; k < seen[d].size(); ++k) CHECK(seen[d][k] == k);
    CHECK(root.find("device_traces")->items()[d].size() == 0);
  }
  // Everything else is read as before.
  CHECK(root.find("segments")->size() == full.segments.size());
}

TEST_CASE("snapshot stream: the streamed snapshot equals the value tree's, ours and PyTorch's") {
  TempDir dir;
  const std::string ours = export_test::pickle_bytes(export_test::make_full_snapshot());
  const std::string torch = export_test::read_bytes(export_test::reference_pickle());
  for (const std::string* bytes : {&ours, &torch}) {
    const gmp::Snapshot tree = via_tree(*bytes);
    export_test::require_same(tree, gmp::parse_snapshot(*bytes));
    const std::string path = dir.file("s.pickle");
    export_test::write_bytes(path, *bytes);
    export_test::require_same(tree, gmp::load_compact_snapshot(path).expand());
  }
  // PyTorch's file memoizes every dict, list and string (26453 objects): entries included.
  const gmp::CompactSnapshot c = gmp::load_compact_snapshot(export_test::reference_pickle());
  REQUIRE(c.device_traces.size() == 1);
  CHECK(c.device_traces[0].size() == via_tree(torch).device_traces[0].size());
}

TEST_CASE("snapshot stream: summary, HTML, Perfetto and replay read a CompactSnapshot exactly as a Snapshot") {
  const std::string ours = export_test::pickle_bytes(export_test::make_full_snapshot());
  const std::string torch = export_test::read_bytes(export_test::reference_pickle());
  for (const std::string* bytes : {&ours, &torch}) {
    const gmp::Snapshot tree = via_tree(*bytes);
    const gmp::CompactSnapshot compact = gmp::parse_compact_snapshot(*bytes);
    CHECK(gmp::format_summary(gmp::summarize(compact)) == gmp::format_summary(gmp::summarize(tree)));
    CHECK(gmp::render_html_report(compact) == gmp::render_html_report(tree));
    CHECK(perfetto_of(compact) == perfetto_of(tree));
    CHECK(replay_of(compact) == replay_of(tree));
  }
}

TEST_CASE("snapshot stream: a memo reference to a streamed entry is refused with one clear error") {
  // e = {'action': 'alloc', 'addr': 1, 'size': 8}
  // pickle.dumps({'segments': [], 'device_traces': [[e], [e]]}, protocol=4): device 1's e is a
  // BINGET of device 0's, streamed (APPEND) before it.
  const std::string bytes = export_test::bin(
      "\x80\x04\x95\x55\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08segments\x94\x5d\x94\x8c\x0d"
      "device_traces\x94\x5d\x94\x28\x5d\x94\x7d\x94\x28\x8c\x06"
      "action\x94\x8c\x05"
      "alloc\x94\x8c\x04"
      "addr\x94\x4b\x01\x8c\x04size\x94\x4b\x08\x75\x61\x5d\x94\x68\x06\x61\x65\x75\x2e");
  REQUIRE(bytes.size() == 96);
  // The value tree shares it (one entry per device) ...
  CHECK(via_tree(bytes).device_traces.at(1).size() == 1);
  // ... the streaming reader cannot, and says so.
  try {
    (void)gmp::parse_compact_snapshot(bytes, "twice.pickle");
    FAIL("no FormatError");
  } catch (const gmp::FormatError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("twice.pickle: pickle: memo entry 6 refers to a streamed list item") == 0);
  }
}

TEST_CASE("snapshot stream: a frames list shared with an earlier, streamed entry is found again") {
  // fr = [{'name': 'f', 'filename': 'a.py', 'line': 3}]
  // pickle.dumps({'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 1, 'size': 8, 'frames': fr}],
  //               [{'action': 'free_completed', 'addr': 1, 'size': 8, 'frames': fr}]]}, protocol=4)
  // Device 1's entry refers to fr through the memo after device 0's entry, and fr with it, was
  // streamed and released (PyTorch's pickles share a frames list between alloc and free this way).
  const std::string bytes = export_test::bin(
      "\x80\x04\x95\xac\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08segments\x94\x5d\x94\x8c\x0d"
      "device_traces\x94\x5d\x94\x28\x5d\x94\x7d\x94\x28\x8c\x06"
      "action\x94\x8c\x05"
      "alloc\x94\x8c\x04"
      "addr\x94K\x01\x8c\x04size\x94K\x08\x8c\x06"
      "frames\x94\x5d\x94\x7d\x94\x28\x8c\x04name\x94\x8c\x01"
      "f\x94\x8c\x08"
      "filename\x94\x8c\x04"
      "a.py\x94\x8c\x04line\x94K\x03uaua\x5d\x94\x7d\x94\x28h\x07\x8c\x0e"
      "free_completed\x94h\x09K\x01h\x0aK\x08h\x0bh\x0cuaeu.");
  REQUIRE(bytes.size() == 183);
  const gmp::CompactSnapshot c = gmp::parse_compact_snapshot(bytes);
  REQUIRE(c.device_traces.size() == 2);
  const gmp::Frames& a = c.device_traces[0][0].frames;
  const gmp::Frames& b = c.device_traces[1][0].frames;
  REQUIRE(a);
  CHECK(a.get() == b.get());
  CHECK(*a == std::vector<gmp::Frame>{{"a.py", 3, "f"}});
  export_test::require_same(via_tree(bytes), gmp::parse_snapshot(bytes));
}

TEST_CASE("snapshot stream: files are read in chunks; long strings and truncations") {
  TempDir dir;
  gmp::Snapshot s = export_test::make_full_snapshot();
  // A frame longer than the 1 MiB read chunk.
  const std::string longname(3u << 20, 'x');
  s.device_traces[0][0].frames = export_test::make_frames({{longname, 7, "f"}});
  const std::string bytes = export_test::pickle_bytes(s);
  const std::string path = dir.file("long.pickle");
  export_test::write_bytes(path, bytes);
  const gmp::Snapshot back = gmp::load_compact_snapshot(path).expand();
  REQUIRE(back.device_traces[0][0].frames);
  CHECK(back.device_traces[0][0].frames->at(0).filename == longname);
  export_test::require_same(via_tree(bytes), back);

  // Truncated files: a FormatError naming the file, wherever the cut falls.
  const std::string small = export_test::pickle_bytes(export_test::make_full_snapshot());
  for (std::size_t cut = 1; cut < small.size(); cut += 1 + small.size() / 40) {
    INFO("cut at " << cut);
    const std::string p = dir.file("cut.pickle");
    export_test::write_bytes(p, small.substr(0, cut));
    try {
      (void)gmp::load_compact_snapshot(p);
      FAIL("no FormatError");
    } catch (const gmp::FormatError& e) {
      CHECK(std::string(e.what()).find(p + ": ") == 0);
    }
  }
}
