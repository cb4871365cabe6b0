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
#include "gpumemprof/codec/pickle_reader.hpp"
#include "gpumemprof/error.hpp"
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


// Trace entries as CPython's pickler writes them (every dict memoized, APPENDS batches), each
// shape of value at least once: the flat reading takes the plain entries and gives the others
// back to the opcode loop part way through (a new key, a new frames list, a nested dict, an int
// key). pickle.dumps({'segments': [], 'device_traces': [d0, d1]}, protocol=4), with M = 2**20 and
// fr = [{'name': 'f', 'filename': 'a.py', 'line': 3}]:
//   d0 = [{'action': 'segment_alloc', 'addr': M, 'size': 2*M, 'stream': 0, 'time_us': 5},
//         {'action': 'alloc', 'addr': M, 'size': 512, 'stream': 0, 'time_us': 6},
//         {'action': 'alloc', 'addr': M + 512, 'size': 1024, 'stream': 0, 'time_us': 7, 'frames': fr},
//         {'action': 'alloc', 'addr': M + 1536, 'size': 512, 'stream': 0, 'time_us': 7.5, 'frames': fr,
//          'user_metadata': 'step 1'},
//         {'action': 'free_requested', 'addr': M, 'size': True, 'stream': None, 'extra': {'x': 1}, 'time_us': 8},
//         {'action': 'free_completed', 'addr': M, 'size': 512, 3: 'an int key', 'time_us': 9},
//         {'action': 'alloc', 'addr': M + 2048, 'size': 4096, 'stream': 0, 'time_us': 10,
//          'user_metadata': 'step 1', 'compile_context': 'N/A'},
//         {'action': 'oom', 'device_free': 100, 'addr': 5, 'size': 8 * M, 'stream': 0, 'time_us': 11},
//         {'action': 'alloc', 'addr': M + 8192, 'size': 512, 'stream': 0, 'time_us': 12.5, 'frames': fr,
//          'user_metadata': 'step 2'},
//         {'action': 'free_requested', 'addr': M + 8192, 'size': False, 'stream': None, 'time_us': 13,
//          'compile_context': 'N/A'},
//         {'action': 'oom', 'device_free': 200, 'addr': 5, 'size': 16 * M, 'stream': 0, 'time_us': 14}]
//   d1 = [{'action': 'alloc', 'addr': 2*M + i * 512, 'size': 512, 'stream': 7, 'time_us': 20 + i} for i in range(3)]
std::string mixed_entries() {
  const std::string bytes = export_test::bin(
      "\x80\x04\x95\xc6\x02\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e\x74\x73"
      "\x94\x5d\x94\x8c\x0d\x64\x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73\x94\x5d\x94\x28\x5d\x94"
      "\x28\x7d\x94\x28\x8c\x06\x61\x63\x74\x69\x6f\x6e\x94\x8c\x0d\x73\x65\x67\x6d\x65\x6e\x74\x5f\x61"
      "\x6c\x6c\x6f\x63\x94\x8c\x04\x61\x64\x64\x72\x94\x4a\x00\x00\x10\x00\x8c\x04\x73\x69\x7a\x65\x94"
      "\x4a\x00\x00\x20\x00\x8c\x06\x73\x74\x72\x65\x61\x6d\x94\x4b\x00\x8c\x07\x74\x69\x6d\x65\x5f\x75"
      "\x73\x94\x4b\x05\x75\x7d\x94\x28\x68\x07\x8c\x05\x61\x6c\x6c\x6f\x63\x94\x68\x09\x4a\x00\x00\x10"
      "\x00\x68\x0a\x4d\x00\x02\x68\x0b\x4b\x00\x68\x0c\x4b\x06\x75\x7d\x94\x28\x68\x07\x68\x0e\x68\x09"
      "\x4a\x00\x02\x10\x00\x68\x0a\x4d\x00\x04\x68\x0b\x4b\x00\x68\x0c\x4b\x07\x8c\x06\x66\x72\x61\x6d"
      "\x65\x73\x94\x5d\x94\x7d\x94\x28\x8c\x04\x6e\x61\x6d\x65\x94\x8c\x01\x66\x94\x8c\x08\x66\x69\x6c"
      "\x65\x6e\x61\x6d\x65\x94\x8c\x04\x61\x2e\x70\x79\x94\x8c\x04\x6c\x69\x6e\x65\x94\x4b\x03\x75\x61"
      "\x75\x7d\x94\x28\x68\x07\x68\x0e\x68\x09\x4a\x00\x06\x10\x00\x68\x0a\x4d\x00\x02\x68\x0b\x4b\x00"
      "\x68\x0c\x47\x40\x1e\x00\x00\x00\x00\x00\x00\x68\x10\x68\x11\x8c\x0d\x75\x73\x65\x72\x5f\x6d\x65"
      "\x74\x61\x64\x61\x74\x61\x94\x8c\x06\x73\x74\x65\x70\x20\x31\x94\x75\x7d\x94\x28\x68\x07\x8c\x0e"
      "\x66\x72\x65\x65\x5f\x72\x65\x71\x75\x65\x73\x74\x65\x64\x94\x68\x09\x4a\x00\x00\x10\x00\x68\x0a"
      "\x88\x68\x0b\x4e\x8c\x05\x65\x78\x74\x72\x61\x94\x7d\x94\x8c\x01\x78\x94\x4b\x01\x73\x68\x0c\x4b"
      "\x08\x75\x7d\x94\x28\x68\x07\x8c\x0e\x66\x72\x65\x65\x5f\x63\x6f\x6d\x70\x6c\x65\x74\x65\x64\x94"
      "\x68\x09\x4a\x00\x00\x10\x00\x68\x0a\x4d\x00\x02\x4b\x03\x8c\x0a\x61\x6e\x20\x69\x6e\x74\x20\x6b"
      "\x65\x79\x94\x68\x0c\x4b\x09\x75\x7d\x94\x28\x68\x07\x68\x0e\x68\x09\x4a\x00\x08\x10\x00\x68\x0a"
      "\x4d\x00\x10\x68\x0b\x4b\x00\x68\x0c\x4b\x0a\x68\x19\x68\x1a\x8c\x0f\x63\x6f\x6d\x70\x69\x6c\x65"
      "\x5f\x63\x6f\x6e\x74\x65\x78\x74\x94\x8c\x03\x4e\x2f\x41\x94\x75\x7d\x94\x28\x68\x07\x8c\x03\x6f"
      "\x6f\x6d\x94\x8c\x0b\x64\x65\x76\x69\x63\x65\x5f\x66\x72\x65\x65\x94\x4b\x64\x68\x09\x4b\x05\x68"
      "\x0a\x4a\x00\x00\x80\x00\x68\x0b\x4b\x00\x68\x0c\x4b\x0b\x75\x7d\x94\x28\x68\x07\x68\x0e\x68\x09"
      "\x4a\x00\x20\x10\x00\x68\x0a\x4d\x00\x02\x68\x0b\x4b\x00\x68\x0c\x47\x40\x29\x00\x00\x00\x00\x00"
      "\x00\x68\x10\x68\x11\x68\x19\x8c\x06\x73\x74\x65\x70\x20\x32\x94\x75\x7d\x94\x28\x68\x07\x68\x1c"
      "\x68\x09\x4a\x00\x20\x10\x00\x68\x0a\x89\x68\x0b\x4e\x68\x0c\x4b\x0d\x68\x24\x68\x25\x75\x7d\x94"
      "\x28\x68\x07\x68\x27\x68\x28\x4b\xc8\x68\x09\x4b\x05\x68\x0a\x4a\x00\x00\x00\x01\x68\x0b\x4b\x00"
      "\x68\x0c\x4b\x0e\x75\x65\x5d\x94\x28\x7d\x94\x28\x68\x07\x68\x0e\x68\x09\x4a\x00\x00\x20\x00\x68"
      "\x0a\x4d\x00\x02\x68\x0b\x4b\x07\x68\x0c\x4b\x14\x75\x7d\x94\x28\x68\x07\x68\x0e\x68\x09\x4a\x00"
      "\x02\x20\x00\x68\x0a\x4d\x00\x02\x68\x0b\x4b\x07\x68\x0c\x4b\x15\x75\x7d\x94\x28\x68\x07\x68\x0e"
      "\x68\x09\x4a\x00\x04\x20\x00\x68\x0a\x4d\x00\x02\x68\x0b\x4b\x07\x68\x0c\x4b\x16\x75\x65\x65\x75"
      "\x2e");
  REQUIRE(bytes.size() == 721);
  return bytes;
}

}  // namespace

TEST_CASE("snapshot stream: trace entries are handed over as appended, and the lists stay empty") {
  const gmp::Snapshot full = export_test::make_full_snapshot();  // three device traces, the last empty
  REQUIRE(full.device_traces.size() == 3);
  const std::string bytes = export_test::pickle_bytes(full);
  std::vector<std::vector<std::size_t>> seen(3);
  const gmp::PickleItemStream stream{"device_traces",
                                     [&](std::size_t list, std::size_t item, const DataValue& v) {
                                       REQUIRE(list < seen.size());
                                       CHECK(v.is(DataValue::Kind::dict));
                                       seen[list].push_back(item);
                                     },
                                     {}};  // no flat items: every entry as a value
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

TEST_CASE("snapshot stream: plain entries are handed over flat, the others as values, in order") {
  const std::string bytes = mixed_entries();
  std::vector<std::vector<std::string>> seen(2);  // "flat" or "value", per item, in the order handed over
  std::vector<std::vector<std::size_t>> order(2);
  const auto note = [&](std::size_t list, std::size_t item, const char* how) {
    REQUIRE(list < 2);
    order[list].push_back(item);
    seen[list].push_back(how);
  };
  const gmp::PickleItemStream stream{
      "device_traces", [&](std::size_t list, std::size_t item, const DataValue&) { note(list, item, "value"); },
      [&](std::size_t list, std::size_t item, const gmp::FlatItem&) { note(list, item, "flat"); }};
  (void)gmp::read_pickle(bytes, {}, &stream);
  CHECK(order[0] == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(order[1] == std::vector<std::size_t>{0, 1, 2});
  CHECK(seen[0] == std::vector<std::string>{"value", "flat", "value", "value", "value", "value", "value", "value",
                                            "flat", "flat", "flat"});
  CHECK(seen[1] == std::vector<std::string>{"flat", "flat", "flat"});
  // Whichever way an entry came, the snapshot is the value tree's.
  const gmp::Snapshot tree = via_tree(bytes);
  export_test::require_same(tree, gmp::parse_snapshot(bytes));
  const auto& d0 = tree.device_traces.at(0);
  REQUIRE(d0.size() == 11);
  CHECK(d0[8].time_us == 12);
  CHECK(d0[8].user_metadata == "step 2");
  CHECK((d0[8].frames && d0[8].frames.get() == d0[2].frames.get()));
  CHECK(d0[9].size == 0);
  CHECK(d0[10].addr == 200);  // an OOM's device_free
  TempDir dir;
  export_test::write_bytes(dir.file("mixed.pickle"), bytes);
  export_test::require_same(tree, gmp::load_compact_snapshot(dir.file("mixed.pickle")).expand());
}

TEST_CASE("snapshot stream: a flat entry's wrong value is named as in the value tree") {
  // pickle.dumps({'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 1, 'size': 8},
  //                                                  {'action': 'alloc', 'addr': 2, 'size': 'big'}]]}, protocol=4)
  const std::string bytes = export_test::bin(
      "\x80\x04\x95\x64\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x08\x73\x65\x67\x6d\x65\x6e\x74\x73"
      "\x94\x5d\x94\x8c\x0d\x64\x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73\x94\x5d\x94\x5d\x94\x28"
      "\x7d\x94\x28\x8c\x06\x61\x63\x74\x69\x6f\x6e\x94\x8c\x05\x61\x6c\x6c\x6f\x63\x94\x8c\x04\x61\x64"
      "\x64\x72\x94\x4b\x01\x8c\x04\x73\x69\x7a\x65\x94\x4b\x08\x75\x7d\x94\x28\x68\x07\x68\x08\x68\x09"
      "\x4b\x02\x68\x0a\x8c\x03\x62\x69\x67\x94\x75\x65\x61\x75\x2e");
  REQUIRE(bytes.size() == 111);
  for (const bool flat : {true, false}) {
    INFO((flat ? "streamed" : "value tree"));
    try {
      if (flat) {
        (void)gmp::parse_compact_snapshot(bytes, "bad.pickle");
      } else {
        (void)gmp::snapshot_from_value(gmp::read_pickle(bytes), "bad.pickle");
      }
      FAIL("no FormatError");
    } catch (const gmp::FormatError& e) {
      CHECK(std::string(e.what()) == "bad.pickle: device_traces[0][1].size: expected int, found str");
    }
  }
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
