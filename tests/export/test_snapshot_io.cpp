// Snapshots: PyTorch's schema and key names, round trips through pickle and JSON files,
// PyTorch's own snapshot, corrupt files, and the file checked by check_snapshot.py and Python.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/pickle_reader.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"

using export_test::TempDir;
using gmp::DataValue;
using gmp::FormatError;
using Kind = gmp::DataValue::Kind;

namespace {

std::vector<std::string> keys_of(const DataValue& dict) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : dict.entries()) keys.push_back(k.as_string());
  return keys;
}

std::string format_error_of(const std::string& path) {
  try {
    (void)gmp::load_snapshot(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no FormatError)";
}

}  // namespace

TEST_CASE("snapshot: PyTorch's key names, order and types") {
  const DataValue root = gmp::read_pickle(export_test::pickle_bytes(export_test::make_full_snapshot()));
  CHECK(keys_of(root) ==
        std::vector<std::string>{"segments", "device_traces", "allocator_settings", "external_annotations"});
  const DataValue& seg = root.find("segments")->items()[0];
  CHECK(keys_of(seg) == std::vector<std::string>{"device", "address", "total_size", "allocated_size", "active_size",
                                                 "requested_size", "stream", "segment_type", "segment_pool_id",
                                                 "is_expandable", "blocks", "frames"});
  // Without frames PyTorch puts the empty list before the blocks.
  CHECK(keys_of(root.find("segments")->items()[1]) ==
        std::vector<std::string>{"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                                 "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"});
  const DataValue* pool = seg.find("segment_pool_id");
  REQUIRE(pool->is(Kind::tuple));
  CHECK(pool->size() == 2);
  CHECK(pool->items()[0].as_int() == 0);
  CHECK(seg.find("segment_type")->as_string() == "large");
  CHECK(seg.find("is_expandable")->is(Kind::boolean));
  const DataValue& block = seg.find("blocks")->items()[0];
  CHECK(keys_of(block) == std::vector<std::string>{"address", "size", "requested_size", "state", "frames"});
  CHECK(block.find("state")->as_string() == "active_allocated");
  const DataValue& frame = block.find("frames")->items()[0];
  CHECK(keys_of(frame) == std::vector<std::string>{"name", "filename", "line"});

  const DataValue& trace = root.find("device_traces")->items()[0];
  CHECK(keys_of(trace.items()[0]) == std::vector<std::string>{"action", "addr", "size", "stream", "time_us",
                                                              "compile_context", "user_metadata", "frames"});
  const DataValue& oom = trace.items()[trace.size() - 1];
  CHECK(oom.find("action")->as_string() == "oom");
  CHECK(oom.find("addr") == nullptr);
  CHECK(oom.find("device_free")->as_int() == 123456789);
  CHECK(trace.items()[0].find("compile_context")->as_string() == "N/A");
  CHECK(root.find("device_traces")->size() == 3);

  const DataValue* settings = root.find("allocator_settings");
  REQUIRE(settings->is(Kind::dict));
  CHECK(settings->find("roundup_power2_divisions")->is(Kind::dict));
  CHECK(settings->find("expandable_segments")->as_bool());
  CHECK(settings->find("garbage_collection_threshold")->is(Kind::floating));
  const DataValue& note = root.find("external_annotations")->items()[0];
  CHECK(keys_of(note) == std::vector<std::string>{"stage", "name", "device", "time_us"});
  CHECK(note.find("stage")->as_string() == "START");
  CHECK(root.find("external_annotations")->items()[1].find("stage")->as_string() == "END");
}

TEST_CASE("snapshot: the same keys as PyTorch's own snapshot") {
  const DataValue ours = gmp::read_pickle(export_test::pickle_bytes(export_test::make_full_snapshot()));
  const DataValue theirs = gmp::read_pickle(gmp::read_file(export_test::reference_pickle()));
  const auto sorted_keys = [](const DataValue& d) {
    auto k = keys_of(d);
    std::sort(k.begin(), k.end());
    return k;
  };
  CHECK(sorted_keys(ours) == sorted_keys(theirs));
  const DataValue& s1 = ours.find("segments")->items()[0];
  const DataValue& s2 = theirs.find("segments")->items()[0];
  CHECK(sorted_keys(s1) == sorted_keys(s2));
  CHECK(sorted_keys(s1.find("blocks")->items()[0]) == sorted_keys(s2.find("blocks")->items()[0]));
  const DataValue& e1 = ours.find("device_traces")->items()[0].items()[0];
  const DataValue& e2 = theirs.find("device_traces")->items()[0].items()[0];
  CHECK(keys_of(e1) == keys_of(e2));
  CHECK(keys_of(e1.find("frames")->items()[0]) == keys_of(e2.find("frames")->items()[0]));
  CHECK(keys_of(ours.find("external_annotations")->items()[0]) ==
        keys_of(theirs.find("external_annotations")->items()[0]));
}

TEST_CASE("snapshot: round trip through a pickle file and a JSON file") {
  TempDir dir;
  const gmp::Snapshot snap = export_test::make_full_snapshot();
  for (const char* name : {"snap.pickle", "snap.json", "SNAP.JSON", "snapshot"}) {
    INFO(name);
    const std::string path = dir.file(name);
    gmp::write_snapshot_file(snap, path);
    const std::string bytes = gmp::read_file(path);
    const bool json = gmp::snapshot_format_for(name) == gmp::SnapshotFormat::json;
    CHECK((bytes[0] == '{') == json);
    CHECK((static_cast<unsigned char>(bytes[0]) == 0x80) == !json);
    const gmp::Snapshot back = gmp::load_snapshot(path);
    export_test::require_same(snap, back);
  }
}

TEST_CASE("snapshot: shared frames are written once and come back shared") {
  gmp::Snapshot shared = export_test::make_full_snapshot();
  gmp::Snapshot copies = shared;
  for (auto& e : copies.device_traces[0]) {
    if (e.frames) e.frames = std::make_shared<const std::vector<gmp::Frame>>(*e.frames);  // equal, not shared
  }
  const std::string a = export_test::pickle_bytes(shared);
  const std::string b = export_test::pickle_bytes(copies);
  CHECK(a.size() < b.size());
  const gmp::Snapshot from_a = gmp::parse_snapshot(a);
  const gmp::Snapshot from_b = gmp::parse_snapshot(b);
  export_test::require_same(from_a, from_b);
  export_test::require_same(shared, from_a);
  // The reader shares memo-shared lists, and equal lists too.
  const auto& t = from_b.device_traces[0];
  CHECK(t[0].frames.get() == t[1].frames.get());
  CHECK(t[1].frames.get() == from_b.segments[0].frames.get());
  CHECK(t[2].frames.get() == t[3].frames.get());
  CHECK(t[0].frames.get() != t[2].frames.get());
}

TEST_CASE("snapshot: integers beyond 2^53 are refused when writing a pickle") {
  gmp::Snapshot s = export_test::make_full_snapshot();
  s.segments[0].address = std::uint64_t{1} << 60;
  std::ostringstream os;
  try {
    gmp::write_snapshot(s, os);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("'address'") != std::string::npos);
  }
  // JSON holds them exactly.
  std::ostringstream js;
  gmp::write_snapshot(s, js, gmp::SnapshotFormat::json);
  CHECK(gmp::parse_snapshot(js.str()).segments[0].address == std::uint64_t{1} << 60);
}

TEST_CASE("snapshot: PyTorch 2.11's snapshot loads completely") {
  const gmp::Snapshot s = gmp::load_snapshot(export_test::reference_pickle());
  REQUIRE(s.segments.size() == 109);
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE(s.device_traces[0].size() == 9661);
  const auto& seg = s.segments[0];
  CHECK(seg.address == 140365906575360ULL);
  CHECK(seg.total_size == 163577856ULL);
  CHECK(seg.is_large);
  CHECK_FALSE(seg.is_expandable);
  REQUIRE(seg.blocks.size() == 1);
  CHECK(seg.blocks[0].state == gmp::BlockState::inactive);
  CHECK(seg.blocks[0].requested_size == 162529935ULL);
  const auto& e = s.device_traces[0][0];
  CHECK(e.action == gmp::TraceAction::segment_alloc);
  CHECK(e.addr == 140371306741760ULL);
  CHECK(e.size == 2097152);
  CHECK(e.time_us == 1795303894267574LL);
  CHECK(e.compile_context == "N/A");
  REQUIRE(e.frames);
  REQUIRE(e.frames->size() == 7);
  CHECK((*e.frames)[0] == gmp::Frame{"site-packages/torch/nn/modules/module.py", 1370, "convert"});
  std::size_t allocs = 0;
  std::size_t active_blocks = 0;
  std::uint64_t reserved = 0;
  for (const auto& t : s.device_traces[0]) allocs += t.action == gmp::TraceAction::alloc ? 1 : 0;
  for (const auto& g : s.segments) {
    reserved += g.total_size;
    for (const auto& b : g.blocks) active_blocks += b.state == gmp::BlockState::active_allocated ? 1 : 0;
  }
  CHECK(allocs == 3186);
  CHECK(active_blocks == 3);
  CHECK(reserved == 3684696064ULL);
  REQUIRE(s.allocator_settings.size() == 9);
  CHECK(s.allocator_settings[0].first == "PYTORCH_CUDA_ALLOC_CONF");
  CHECK(s.allocator_settings[1] == std::pair<std::string, gmp::SettingValue>{"max_split_size", std::int64_t{-1}});
  const auto& divisions =
      std::get<std::vector<std::pair<std::string, std::int64_t>>>(s.allocator_settings.back().second);
  CHECK(divisions.size() == 16);
  REQUIRE(s.external_annotations.size() == 16);
  CHECK(s.external_annotations[0].name == "Optimizer.step#SGD.step");
  CHECK(s.external_annotations[0].start);
  CHECK_FALSE(s.external_annotations[1].start);
  CHECK(s.external_annotations[0].time_us == 1795303895606478LL);
}

TEST_CASE("snapshot: missing optional keys take defaults") {
  // {'segments': [{'address': 4096, 'total_size': 1024,
  //                'blocks': [{'size': 512, 'state': 'active_allocated'}, {'size': 512, 'state': 'inactive'}]}],
  //  'device_traces': [[{'action': 'alloc', 'addr': 4096, 'size': 500}]]}
  const std::string json =
      R"({"segments": [{"address": 4096, "total_size": 1024, "blocks": [{"size": 512, "state": "active_allocated"},)"
      R"( {"size": 512, "state": "inactive"}]}], "device_traces": [[{"action": "alloc", "addr": 4096, "size": 500}]]})";
  const gmp::Snapshot s = gmp::parse_snapshot(json, "minimal.json");
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].device == 0);
  CHECK(s.segments[0].is_large);
  CHECK(s.segments[0].allocated_size == 512);
  CHECK(s.segments[0].active_size == 512);
  CHECK(s.segments[0].requested_size == 512);
  CHECK(s.segments[0].blocks[1].address == 4096 + 512);
  CHECK(s.segments[0].blocks[0].requested_size == 512);
  CHECK(s.segments[0].blocks[1].requested_size == 0);
  REQUIRE(s.device_traces.size() == 1);
  CHECK(s.device_traces[0][0].compile_context == "N/A");
  CHECK(s.device_traces[0][0].time_us == 0);
  CHECK(s.allocator_settings.empty());
  CHECK(s.external_annotations.empty());
  CHECK(gmp::parse_snapshot(R"({"segments": []})").device_traces.empty());
}

TEST_CASE("snapshot: foreign and corrupt files are FormatErrors naming the path and the problem") {
  TempDir dir;
  const auto file = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.file(name);
    export_test::write_bytes(path, bytes);
    return path;
  };
  const auto has = [](const std::string& msg, const std::string& part) {
    INFO(msg);
    CHECK(msg.find(part) != std::string::npos);
  };
  std::string p = file("random.bin", export_test::bin("\x13\x37\xca\xfe\x00\x01garbage"));
  has(format_error_of(p), p + ": not a snapshot");
  p = file("empty.pickle", "");
  has(format_error_of(p), p + ": the file is empty");
  // pickle.dumps([1, 2], protocol=4): a list, as torch.cuda.memory_snapshot() returns.
  p = file("list.pickle", export_test::bin("\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02"
                                           "e."));
  has(format_error_of(p), p + ": a list at the top level");
  // pickle.dumps({'device_traces': []}, protocol=4)
  p = file("nosegs.pickle", export_test::bin("\x80\x04\x95\x16\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x0d"
                                             "device_traces\x94]\x94s."));
  has(format_error_of(p), p + ": not a memory snapshot: the top-level dict has no 'segments'");
  p = file("int.pickle", export_test::bin("\x80\x04K\x05."));
  has(format_error_of(p), "a int at the top level");
  p = file("global.pickle", export_test::bin("\x80\x02"
                                             "cos\nsystem\n."));
  has(format_error_of(p), p + ": pickle: unsupported opcode GLOBAL");

  const std::string good = export_test::pickle_bytes(export_test::make_full_snapshot());
  p = file("truncated.pickle", good.substr(0, good.size() / 2));
  has(format_error_of(p), p + ": pickle: truncated");

  p = file("wrongtype.json",
           R"({"segments": [{"address": 0, "total_size": 8, "blocks": [{"size": "8", "state": "inactive"}]}]})");
  has(format_error_of(p), p + ": segments[0].blocks[0].size: expected int, found str");
  p = file("badstate.json",
           R"({"segments": [{"address": 0, "total_size": 8, "blocks": [{"size": 8, "state": "busy"}]}]})");
  has(format_error_of(p), "segments[0].blocks[0].state: unknown block state 'busy'");
  p = file("badaction.json", R"({"segments": [], "device_traces": [[{"action": "alloc"}, {"action": "teleport"}]]})");
  has(format_error_of(p), "device_traces[0][1].action: unknown action 'teleport'");
  p = file("noblocks.json", R"({"segments": [{"address": 0, "total_size": 8}]})");
  has(format_error_of(p), "segments[0]: missing 'blocks'");
  p = file("badjson.json", "{\"segments\": [}");
  has(format_error_of(p), p + ": json: expected a value at line 1");
  p = file("negative.json", R"({"segments": [{"address": -5, "total_size": 8, "blocks": []}]})");
  has(format_error_of(p), "segments[0].address: negative value -5");
  p = file("device.json", R"({"segments": [{"device": -1, "address": 0, "total_size": 8, "blocks": []}]})");
  has(format_error_of(p), "segments[0].device: device index -1 out of range");
  p = file("time.json", R"({"segments": [], "device_traces": [[{"action": "alloc", "time_us": 1e300}]]})");
  has(format_error_of(p), "device_traces[0][0].time_us: time out of range");

  try {
    (void)gmp::load_snapshot(dir.file("absent.pickle"));
    FAIL("no exception");
  } catch (const gmp::IoError& e) {
    CHECK(std::string(e.what()).find(dir.file("absent.pickle")) != std::string::npos);
  }
}

TEST_CASE("snapshot: check_snapshot.py and Python's pickle accept our file") {
  const std::string checker = export_test::check_snapshot_script();
  REQUIRE(export_test::have_python());
  TempDir dir;
  const std::string ours = dir.file("ours.pickle");
  gmp::write_snapshot_file(export_test::make_full_snapshot(), ours);
  const std::string rewritten = dir.file("resnet50.pickle");
  gmp::write_snapshot_file(gmp::load_snapshot(export_test::reference_pickle()), rewritten);

  {
    for (const std::string& path : {ours, rewritten}) {
      std::string out;
      const int rc = export_test::run_python(export_test::read_bytes(checker), {path}, &out);
      INFO(out);
      CHECK(rc == 0);
      CHECK(out.find(path + ": ok") != std::string::npos);
    }
  }

  const std::string script = R"(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
seg = s['segments'][0]
assert seg['address'] == 0x7f1234000000 and seg['segment_type'] == 'large', seg
assert seg['segment_pool_id'] == (0, 0) and seg['is_expandable'] is False
assert seg['blocks'][1]['state'] == 'active_pending_free'
assert seg['frames'][1]['name'] == 'h\u00e9llo \u2603 \U0001F600', seg['frames'][1]
assert seg['frames'][1]['filename'] == '/src/q"uote\\back.cpp'
assert s['segments'][1]['stream'] == 94000000000000 and s['segments'][1]['is_expandable'] is True
t = s['device_traces'][0]
assert [e['action'] for e in t] == ['segment_alloc', 'alloc', 'alloc', 'free_requested', 'segment_map',
    'segment_unmap', 'alloc', 'free_requested', 'free_completed', 'snapshot', 'oom'], t
assert t[1]['compile_context'] == 'compiled_autograd' and t[1]['user_metadata'] == 'step=1 "quoted"\n'
assert t[-1]['device_free'] == 123456789 and 'addr' not in t[-1] and t[-1]['size'] == 1 << 40
assert t[0]['frames'] is t[1]['frames'] is seg['frames']   # written once, shared through the memo
assert s['device_traces'][2] == []
assert s['allocator_settings']['roundup_power2_divisions'] == {'1': 0, '2': 4}
assert s['allocator_settings']['garbage_collection_threshold'] == 0.5
assert s['external_annotations'][2] == {'stage': 'START', 'name': 'eval', 'device': 1, 'time_us': s['device_traces'][1][-1]['time_us'] + 7}
ref = pickle.load(open(sys.argv[3], 'rb'))
again = pickle.load(open(sys.argv[2], 'rb'))
assert again == ref, 'rewritten PyTorch snapshot differs'
print('ok')
)";
  std::string out;
  const int rc = export_test::run_python(script, {ours, rewritten, export_test::reference_pickle()}, &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("ok") != std::string::npos);
}
