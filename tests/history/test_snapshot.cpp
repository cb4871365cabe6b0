// Snapshots in PyTorch's schema: a replay of a real PyTorch trace with history on, checked
// here, then written by the export layer and checked by tools/check_snapshot.py and
// against the keys of the pickle PyTorch 2.11 wrote for the same workload.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "history_util.hpp"
#include "trace.hpp"

namespace fs = std::filesystem;
using gmp::TraceAction;

namespace {
std::string source_dir() {
  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  return src != nullptr ? src : ".";
}

// Compares the key sets (and the allocator_settings key order) of two snapshot pickles.
const char* kSchemaScript = R"PY(
import pickle, sys
ours, ref = (pickle.load(open(p, "rb")) for p in sys.argv[1:3])
bad = []
def same(what, a, b):
    if set(a) != set(b):
        bad.append(f"{what}: ours {sorted(set(a))} reference {sorted(set(b))}")
# PyTorch's keys, plus ours (the whole device), which PyTorch's viewers ignore.
same("top level", set(ours) - {"device_memory"}, ref)
if "device_memory" not in ours:
    bad.append("no device_memory key")
same("segment", ours["segments"][0], ref["segments"][0])
same("block", ours["segments"][0]["blocks"][0], ref["segments"][0]["blocks"][0])
ref_entries = {e["action"]: e for e in ref["device_traces"][0]}
for e in ours["device_traces"][0]:
    if e["action"] in ref_entries:
        same("trace entry " + e["action"], e, ref_entries[e["action"]])
frames = [f for e in ref["device_traces"][0] for f in e["frames"]][:1]
ours_frames = [f for e in ours["device_traces"][0] for f in e["frames"]][:1]
if frames and ours_frames:
    same("frame", ours_frames[0], frames[0])
if list(ours["allocator_settings"]) != list(ref["allocator_settings"]):
    bad.append(f"allocator_settings keys {list(ours['allocator_settings'])}")
if ours["allocator_settings"]["roundup_power2_divisions"].keys() != ref["allocator_settings"]["roundup_power2_divisions"].keys():
    bad.append("roundup_power2_divisions keys differ")
# PyTorch's keys, plus ours (the annotation's place among the trace entries), which its viewers ignore.
same("annotation", set(ours["external_annotations"][0]) - {"trace_index"}, ref["external_annotations"][0])
if "trace_index" not in ours["external_annotations"][0]:
    bad.append("no trace_index on an annotation")
if ours["segments"][0]["segment_pool_id"] != (0, 0):
    bad.append("segment_pool_id")
print("\n".join(bad) or "schema matches")
sys.exit(1 if bad else 0)
)PY";
}  // namespace

TEST_CASE("A replay of resnet50_train with history on gives a snapshot in PyTorch's schema") {
  const auto trace = gmp::tools::load_trace(source_dir() + "/tests/data/resnet50_train.trace.gz");
  Recorded r;
  auto& a = r.a();
  std::vector<void*> ptrs(trace.id_count, nullptr);
  {
    gmp::UserMetadataScope md("replay");
    auto range = gmp::annotate("resnet50_train");
    for (const auto& op : trace.ops) {
      if (op.is_alloc) {
        ptrs[op.id] = a.allocate(op.bytes, gmp::Stream(static_cast<std::uintptr_t>(op.stream)));
      } else {
        a.deallocate(ptrs[op.id]);
        ptrs[op.id] = nullptr;
      }
      a.validate();
    }
  }
  const gmp::MemoryStats stats = a.memory_stats();
  const gmp::Snapshot s = gmp::snapshot(a);
  a.validate();

  // Segments: address order, blocks tiling them, sizes adding up to the allocator's stats.
  REQUIRE(!s.segments.empty());
  std::uint64_t reserved = 0, allocated = 0, active = 0;
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const auto& seg = s.segments[i];
    if (i > 0) CHECK(seg.address > s.segments[i - 1].address);
    CHECK(seg.device == 0);
    std::uint64_t at = seg.address, alloc_bytes = 0, active_bytes = 0, requested = 0;
    for (const auto& b : seg.blocks) {
      CHECK(b.address == at);
      at += b.size;
      if (b.state == gmp::BlockState::active_allocated) alloc_bytes += b.size;
      if (b.state != gmp::BlockState::inactive) {
        active_bytes += b.size;
        requested += b.requested_size;
        CHECK(b.requested_size <= b.size);
      } else {
        CHECK(b.requested_size == 0);
        CHECK(b.frames == nullptr);
      }
      if (gmp::stacks_available && b.state == gmp::BlockState::active_allocated) CHECK(b.frames != nullptr);
    }
    CHECK(at == seg.address + seg.total_size);
    CHECK(seg.allocated_size == alloc_bytes);
    CHECK(seg.active_size == active_bytes);
    CHECK(seg.requested_size == requested);
    CHECK(seg.is_large == (seg.total_size != 2 * MiB));
    reserved += seg.total_size;
    allocated += seg.allocated_size;
    active += seg.active_size;
  }
  CHECK(reserved == static_cast<std::uint64_t>(stats.reserved_bytes.all().current));
  CHECK(allocated == static_cast<std::uint64_t>(stats.allocated_bytes.all().current));

  // The device trace: every event of the replay, oldest first, then the snapshot itself.
  REQUIRE(s.device_traces.size() == 1);
  const auto& t = s.device_traces[0];
  CHECK(count(t, TraceAction::alloc) == trace.allocs);
  CHECK(count(t, TraceAction::free_requested) == trace.frees);
  CHECK(count(t, TraceAction::free_completed) == trace.frees);
  CHECK(count(t, TraceAction::segment_alloc) == static_cast<std::size_t>(stats.num_device_alloc));
  CHECK(t.size() == trace.allocs + 2 * trace.frees + static_cast<std::size_t>(stats.num_device_alloc) + 1);
  REQUIRE(t.back().action == TraceAction::snapshot);
  CHECK(t.back().size == active);
  for (std::size_t i = 1; i < t.size(); ++i) CHECK(t[i].time_us >= t[i - 1].time_us);
  CHECK(only(t, TraceAction::alloc).front().user_metadata == "replay");

  // One Frames object per distinct stack (the pickle writer memoizes by object).
  if (gmp::stacks_available) {
    std::map<std::string, std::set<const void*>> objects;  // by the stack's text
    for (const auto& e : t) {
      if (e.action != TraceAction::snapshot) REQUIRE(e.frames != nullptr);
      if (e.frames == nullptr) continue;
      std::string text;
      for (const auto& f : *e.frames) text += f.name + "@" + f.filename + ":" + std::to_string(f.line) + "\n";
      objects[text].insert(e.frames.get());
    }
    for (const auto& [frames, ptrs_of] : objects) CHECK(ptrs_of.size() == 1);
  }

  // allocator_settings: PyTorch 2.11's keys, in its order.
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.allocator_settings) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
                                         "expandable_segments", "pinned_num_register_threads",
                                         "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                                         "graph_capture_record_stream_reuse", "roundup_power2_divisions"});
  CHECK(std::get<std::int64_t>(s.allocator_settings[1].second) == -1);

  REQUIRE(s.external_annotations.size() == 2);
  CHECK(s.external_annotations[0].name == "resnet50_train");
  CHECK(s.external_annotations[0].start);
  CHECK_FALSE(s.external_annotations[1].start);
  CHECK(s.external_annotations[0].time_us <= t.front().time_us);
  CHECK(s.external_annotations[1].time_us >= only(t, TraceAction::free_completed).back().time_us);

  const fs::path file = temp_path("resnet50.pickle");
  gmp::write_snapshot_file(s, file.string());
  REQUIRE(fs::exists(file));
  const std::string checker = source_dir() + "/tools/check_snapshot.py";
  REQUIRE(have_python());
  REQUIRE(fs::exists(checker));
  {
    CHECK(std::system(("python3 '" + checker + "' '" + file.string() + "'").c_str()) == 0);
    const fs::path script = temp_path("schema.py");
    std::ofstream(script) << kSchemaScript;
    const std::string reference = source_dir() + "/tests/data/resnet50_train.snapshot.pickle";
    CHECK(std::system(("python3 '" + script.string() + "' '" + file.string() + "' '" + reference + "'").c_str()) == 0);
    fs::remove(script);
  }
  fs::remove(file);
  for (void* p : ptrs) {
    if (p != nullptr) a.deallocate(p);
  }
  a.validate();
}

TEST_CASE("allocator_settings reflect the allocator's config") {
  const gmp::AllocatorConfig c(
      "max_split_size_mb:64,roundup_power2_divisions:[256:2,>:8],garbage_collection_threshold:0.5");
  const auto s = gmp::allocator_settings(c);
  CHECK(std::get<std::string>(s[0].second) == c.source);
  CHECK(std::get<std::int64_t>(s[1].second) == 64 * static_cast<std::int64_t>(MiB));
  CHECK(std::get<double>(s[2].second) == 0.5);
  CHECK(std::get<bool>(s[3].second) == false);
  const auto& div = std::get<std::vector<std::pair<std::string, std::int64_t>>>(s[8].second);
  REQUIRE(div.size() == 16);
  CHECK(div[0] == std::pair<std::string, std::int64_t>{"1", 2});
  CHECK(div[8] == std::pair<std::string, std::int64_t>{"256", 2});
  CHECK(div[15] == std::pair<std::string, std::int64_t>{"32768", 8});
  CHECK(s[5].first == "release_lock_on_cudamalloc");
  CHECK(std::get<bool>(s[5].second) == false);
  const auto on = gmp::allocator_settings(gmp::AllocatorConfig("release_lock_on_cudamalloc:True"));
  CHECK(std::get<bool>(on[5].second) == true);
}

TEST_CASE("A snapshot without history has segments, empty traces and no frames") {
  SimAlloc sim;
  auto& a = sim.a;
  void* p = a.allocate(1000);
  a.validate();
  const gmp::Snapshot s = gmp::snapshot(a);
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].blocks.size() == 2);
  CHECK(s.segments[0].blocks[0].state == gmp::BlockState::active_allocated);
  CHECK(s.segments[0].blocks[0].requested_size == 1000);
  CHECK(s.segments[0].blocks[0].frames == nullptr);
  CHECK(s.segments[0].blocks[1].state == gmp::BlockState::inactive);
  CHECK(s.segments[0].allocated_size == 1024);
  CHECK(s.segments[0].requested_size == 1000);
  REQUIRE(s.device_traces.size() == 1);
  CHECK(s.device_traces[0].empty());
  CHECK(s.external_annotations.empty());
  a.deallocate(p);
  a.validate();
}

TEST_CASE("Annotations go to every recording allocator, tagged with its device, only while recording") {
  SimAllocator other(gmp::SimulatedBackend(gmp::SimulatedOptions{.capacity = 1 * GiB, .index = 3}),
                     gmp::AllocatorConfig{});
  gmp::HistoryRecorder other_recorder;
  other_recorder.attach(other);
  Recorded r;
  gmp::record_annotation("before", true);
  { auto range = gmp::annotate("step"); }
  const auto mine = r.recorder.annotations();
  const auto theirs = other_recorder.annotations();
  REQUIRE(mine.size() == 3);
  CHECK(mine[0].name == "before");
  CHECK(mine[1].name == "step");
  CHECK(mine[1].start);
  CHECK(mine[2].name == "step");
  CHECK_FALSE(mine[2].start);
  CHECK(mine[1].time_us <= mine[2].time_us);
  CHECK(mine[0].device == 0);
  REQUIRE(theirs.size() == 3);
  CHECK(theirs[1].device == 3);
  const gmp::Snapshot s = gmp::snapshot(other);
  CHECK(s.device_traces.size() == 4);  // indexed by device
  REQUIRE(s.external_annotations.size() == 3);
  CHECK(s.external_annotations[2].device == 3);
  r.recorder.set_options({.enabled = gmp::HistoryEnabled::off});
  other_recorder.set_options({.enabled = gmp::HistoryEnabled::off});
  { auto range = gmp::annotate("unrecorded"); }
  CHECK(r.recorder.annotations().empty());
  CHECK(other_recorder.annotations().empty());
  other.validate();
}

TEST_CASE("record_memory_history, snapshot and dump_snapshot on a default device") {
  const gmp::Device dev("sim:5");
  gmp::record_memory_history({.max_entries = 1000}, dev);
  auto& a = gmp::default_allocator(dev);
  CHECK(gmp::history_recorder_of(a) == &gmp::default_history_recorder(dev));
  CHECK(a.event_sink_count() == 1);
  void* p = a.allocate(12345);
  a.validate();
  gmp::Snapshot s = gmp::snapshot(dev);
  REQUIRE(s.device_traces.size() == 6);
  CHECK(s.device_traces[0].empty());
  CHECK(count(s.device_traces[5], TraceAction::alloc) == 1);
  CHECK(s.segments.at(0).device == 5);
  const fs::path file = temp_path("sim5.pickle");
  gmp::dump_snapshot(file.string(), dev);
  CHECK(fs::file_size(file) > 100);
  if (have_python()) {
    const std::string cmd =
        "python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
        "sys.exit(0 if len(d['device_traces'])==6 and d['segments'][0]['device']==5 else 1)\" '" +
        file.string() + "'";
    CHECK(std::system(cmd.c_str()) == 0);
  }
  fs::remove(file);
  // PyTorch's strings: enabled="state" keeps one event.
  gmp::record_memory_history("state", "alloc", "python", 100, dev);
  CHECK(gmp::default_history_recorder(dev).options().context == gmp::HistoryContext::alloc);
  a.deallocate(p);
  a.validate();
  CHECK(gmp::default_history_recorder(dev).trace().size() == 1);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, dev);
  CHECK(a.event_sink_count() == 0);  // recording off: no sink, nothing on the hot path
  CHECK(gmp::default_history_recorder(dev).trace().empty());
  CHECK_THROWS_AS(gmp::record_memory_history("sometimes", "all", "all", 1, dev), gmp::ConfigError);
}
