// Snapshots of replayed traces name where each block came from: the trace file and line
// (tools/trace_frames.hpp), accepted by tools/check_snapshot.py.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "replay.hpp"
#include "trace_frames.hpp"

namespace gmp = gpumemprof;
namespace fs = std::filesystem;

namespace {

const char* kTrace =
    "# a tiny trace\n"  // line 1
    "a 1 1000 0\n"      // 2
    "a 2 3000000 0\n"   // 3
    "f 1\n"             // 4
    "\n"                // 5
    "a 3 512 7\n";      // 6
const std::string kPath = "runs/tiny.trace";

/// The trace replayed with history on (the newest `max_entries` entries); its snapshot with frames.
gmp::Snapshot replayed(const gmp::tools::Trace& t, std::size_t max_entries, std::size_t* named) {
  gmp::CachingAllocator<gmp::SimulatedBackend> alloc(gmp::SimulatedBackend(gmp::SimulatedOptions{}),
                                                     gmp::AllocatorConfig{});
  gmp::HistoryRecorder history(
      {.context = gmp::HistoryContext::none, .stacks = gmp::HistoryStacks::none, .max_entries = max_entries});
  history.attach(alloc);
  std::vector<void*> live;
  (void)gmp::tools::replay(t, alloc, &live);
  gmp::Snapshot snap = gmp::snapshot(alloc);
  history.detach();
  *named = gmp::tools::add_trace_frames(snap, t, 0);
  for (void* p : live) alloc.deallocate(p);
  alloc.validate();
  return snap;
}

/// "line name" of each alloc/free entry's frame ("-" when it has none).
std::vector<std::string> entry_frames(const gmp::Snapshot& s) {
  std::vector<std::string> out;
  for (const gmp::TraceEntry& e : s.device_traces[0]) {
    if (e.action != gmp::TraceAction::alloc && e.action != gmp::TraceAction::free_requested &&
        e.action != gmp::TraceAction::free_completed) {
      continue;
    }
    if (e.frames == nullptr) {
      out.push_back("-");
      continue;
    }
    REQUIRE(e.frames->size() == 1);
    CHECK(e.frames->front().filename == kPath);
    out.push_back(std::to_string(e.frames->front().line) + " " + e.frames->front().name);
  }
  return out;
}

/// Line of each live block's frame, in address order (0: none).
std::vector<std::int64_t> block_lines(const gmp::Snapshot& s) {
  std::vector<std::int64_t> out;
  for (const auto& seg : s.segments) {
    for (const auto& b : seg.blocks) {
      if (b.state == gmp::BlockState::active_allocated) out.push_back(b.frames ? b.frames->front().line : 0);
      if (b.state == gmp::BlockState::inactive) CHECK(b.frames == nullptr);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("replay --snapshot: every replayed block and event names its trace line") {
  const gmp::tools::Trace t = gmp::tools::parse_trace(kTrace, kPath);
  static_assert(sizeof(gmp::tools::TraceOp) == 24, "the line number costs an op no memory");
  REQUIRE(t.ops.size() == 4);
  CHECK(t.ops[3].line == 6);

  std::size_t named = 0;
  const gmp::Snapshot s = replayed(t, std::numeric_limits<std::size_t>::max(), &named);
  CHECK(named == 5);
  CHECK(entry_frames(s) == std::vector<std::string>{"2 replay alloc", "3 replay alloc", "4 replay free",
                                                    "4 replay free", "6 replay alloc"});
  // Live: the 3000000-byte block (line 3, the large segment) and the 512-byte one (line 6,
  // stream 7's small segment); the 1000-byte block was freed.
  std::vector<std::int64_t> lines = block_lines(s);
  std::sort(lines.begin(), lines.end());
  CHECK(lines == std::vector<std::int64_t>{3, 6});

  const fs::path file = fs::temp_directory_path() / ("gpumemprof-frames-" + std::to_string(::getpid()) + ".pickle");
  gmp::write_snapshot_file(s, file.string());
  // The file name is written once and referenced from the other frames (the pickle memo).
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t copies = 0;
  for (std::size_t at = bytes.find(kPath); at != std::string::npos; at = bytes.find(kPath, at + 1)) ++copies;
  CHECK(copies == 1);
  const char* source = std::getenv("GPUMEMPROF_SOURCE_DIR");
  const std::string checker = std::string(source != nullptr ? source : ".") + "/tools/check_snapshot.py";
  REQUIRE(fs::exists(checker));
  REQUIRE(std::system("python3 -c 'import pickle' >/dev/null 2>&1") == 0);
  CHECK(std::system(("python3 '" + checker + "' '" + file.string() + "' >/dev/null").c_str()) == 0);
  fs::remove(file);
}

TEST_CASE("replay --snapshot: a history ring that dropped old entries loses only their frames") {
  const gmp::tools::Trace t = gmp::tools::parse_trace(kTrace, kPath);
  std::size_t named = 0;
  // The newest 4 entries: free_completed (line 4), segment_alloc (stream 7), alloc (line 6) and the
  // snapshot event that taking the snapshot records.
  const gmp::Snapshot s = replayed(t, 4, &named);
  CHECK(named == 2);
  CHECK(entry_frames(s) == std::vector<std::string>{"4 replay free", "6 replay alloc"});
  std::vector<std::int64_t> lines = block_lines(s);
  std::sort(lines.begin(), lines.end());
  CHECK(lines == std::vector<std::int64_t>{0, 6});  // the line-3 block's alloc was dropped
}
