// Recording history on a simulated device: every enabled/context/stacks mode, the ring,
// PyTorch's event kinds (free_requested vs free_completed, segment events, oom), user
// metadata, and turning history off and on.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "catch.hpp"
#include "history_util.hpp"

using gmp::HistoryContext;
using gmp::HistoryEnabled;
using gmp::HistoryStacks;
using gmp::TraceAction;

namespace {
std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
const std::string kRecordingFile = "test_recording.cpp";
}  // namespace

TEST_CASE("enabled=all records each event with requested size, address, stream and time") {
  const std::int64_t before = now_us();
  Recorded r({.stacks = HistoryStacks::none});
  auto& a = r.a();
  void* p = a.allocate(1000);
  a.validate();
  void* q = a.allocate(3 * MiB, gmp::Stream(7));
  a.validate();
  a.deallocate(p);
  a.validate();
  a.deallocate(q);
  a.validate();
  const auto t = r.recorder.trace();
  const std::int64_t after = now_us();

  using A = TraceAction;
  REQUIRE(actions(t) == std::vector<A>{A::segment_alloc, A::alloc, A::segment_alloc, A::alloc, A::free_requested,
                                       A::free_completed, A::free_requested, A::free_completed});
  CHECK(t[0].size == 2 * MiB);  // small-pool segment
  CHECK(t[1].addr == addr(p));
  CHECK(t[1].size == 1000);  // the requested size, not the 1024-byte block
  CHECK(t[1].stream == 0);
  CHECK(t[2].size == 20 * MiB);
  CHECK(t[2].stream == 7);
  CHECK(t[3].addr == addr(q));
  CHECK(t[3].size == 3 * MiB);
  CHECK(t[3].stream == 7);
  CHECK(t[4].addr == addr(p));
  CHECK(t[4].size == 1000);
  CHECK(t[7].addr == addr(q));
  CHECK(t[7].stream == 7);
  for (std::size_t i = 0; i < t.size(); ++i) {
    CHECK(t[i].compile_context == "N/A");
    CHECK(t[i].user_metadata.empty());
    CHECK(t[i].frames == nullptr);
    // Microseconds since the epoch, within the test's own wall-clock interval, never backwards.
    CHECK(t[i].time_us >= before - 1000);
    CHECK(t[i].time_us <= after + 1000);
    if (i > 0) CHECK(t[i].time_us >= t[i - 1].time_us);
  }
  CHECK(r.recorder.dropped_entries() == 0);
}

TEST_CASE("enabled=state keeps one event and the stacks of live blocks only") {
  Recorded r({.enabled = HistoryEnabled::state});
  auto& a = r.a();
  const int line_p = __LINE__ + 1;  // the next line
  void* p = a.allocate(1000);
  a.validate();
  void* q = a.allocate(5000);
  a.validate();
  a.deallocate(q);
  a.validate();
  CHECK(r.recorder.trace().size() == 1);  // a ring of one: the newest event
  CHECK(r.recorder.trace()[0].action == TraceAction::free_completed);
  const gmp::Snapshot s = gmp::snapshot(a);
  a.validate();
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE(s.device_traces[0].size() == 1);
  CHECK(s.device_traces[0][0].action == TraceAction::snapshot);
  const auto* bp = block_at(s, addr(p));
  const auto* bq = block_at(s, addr(q));
  REQUIRE(bp != nullptr);
  REQUIRE(bq != nullptr);
  CHECK(bp->state == gmp::BlockState::active_allocated);
  CHECK(bq->state == gmp::BlockState::inactive);
  CHECK(bq->frames == nullptr);  // freed: its stack is gone
  if (gmp::stacks_available) {
    CHECK(starts_at(bp->frames, kRecordingFile, line_p));
    CHECK(starts_at(s.segments[0].frames, kRecordingFile, line_p));  // the allocation that created it
  } else {
    CHECK(bp->frames == nullptr);
  }
  a.deallocate(p);
  a.validate();
}

TEST_CASE("enabled=all with max_entries keeps the newest events and counts the dropped") {
  const auto run = [](std::size_t max_entries) {
    Recorded r({.stacks = HistoryStacks::none, .max_entries = max_entries});
    for (std::size_t i = 0; i < 20; ++i) {
      void* p = r.a().allocate(512 * (i + 1));
      r.a().validate();
      r.a().deallocate(p);
      r.a().validate();
    }
    return std::make_pair(r.recorder.trace(), r.recorder.dropped_entries());
  };
  const auto [all, none_dropped] = run(std::numeric_limits<std::size_t>::max());
  const auto [newest, dropped] = run(10);
  REQUIRE(all.size() == 1 + 20 * 3);  // one segment_alloc, then alloc + free_requested + free_completed
  CHECK(none_dropped == 0);
  REQUIRE(newest.size() == 10);
  CHECK(dropped == all.size() - 10);
  for (std::size_t i = 0; i < 10; ++i) {
    const auto& want = all[all.size() - 10 + i];
    CHECK(newest[i].action == want.action);
    CHECK(newest[i].size == want.size);
  }
  CHECK(newest.back().size == 512 * 20);
}

TEST_CASE("A smaller max_entries keeps the newest events recorded so far") {
  Recorded r({.stacks = HistoryStacks::none});
  for (std::size_t i = 0; i < 8; ++i) {
    void* p = r.a().allocate(512 * (i + 1));
    r.a().validate();
    r.a().deallocate(p);
    r.a().validate();
  }
  r.recorder.set_options({.stacks = HistoryStacks::none, .max_entries = 4});
  const auto t = r.recorder.trace();
  REQUIRE(t.size() == 4);
  CHECK(t.back().action == TraceAction::free_completed);
  CHECK(t.back().size == 512 * 8);
  CHECK(t.front().action == TraceAction::free_completed);  // ..., fc(7), alloc(8), fr(8), fc(8)
  CHECK(t.front().size == 512 * 7);
  CHECK(t[1].action == TraceAction::alloc);
  CHECK(t[1].size == 512 * 8);
}

namespace {
// One allocation, one free and one live allocation at known lines, under `context`.
struct ContextRun {
  gmp::Snapshot snap;
  std::vector<gmp::TraceEntry> trace;
  std::uintptr_t live = 0;
  int alloc_line = 0, free_line = 0, live_line = 0;
};
ContextRun run_context(HistoryContext context, HistoryStacks stacks = HistoryStacks::cpp) {
  ContextRun out;
  Recorded r({.context = context, .stacks = stacks});
  auto& a = r.a();
  out.alloc_line = __LINE__ + 1;  // the next line
  void* p = a.allocate(4096);
  a.validate();
  out.free_line = __LINE__ + 1;  // the next line
  a.deallocate(p);
  a.validate();
  out.live_line = __LINE__ + 1;  // the next line
  void* q = a.allocate(8192);
  a.validate();
  out.live = addr(q);
  out.snap = gmp::snapshot(a);
  out.trace = out.snap.device_traces.at(0);
  a.deallocate(q);
  a.validate();
  return out;
}
bool no_frames(const std::vector<gmp::TraceEntry>& t) {
  for (const auto& e : t) {
    if (e.frames != nullptr) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("context=none records no stacks") {
  const ContextRun c = run_context(HistoryContext::none);
  CHECK(no_frames(c.trace));
  CHECK(block_at(c.snap, c.live)->frames == nullptr);
  CHECK(c.snap.segments.at(0).frames == nullptr);
}

TEST_CASE("stacks=none records no stacks even with context=all") {
  const ContextRun c = run_context(HistoryContext::all, HistoryStacks::none);
  CHECK(no_frames(c.trace));
  CHECK(block_at(c.snap, c.live)->frames == nullptr);
}

TEST_CASE("context=state gives live blocks and segments stacks, events none") {
  const ContextRun c = run_context(HistoryContext::state);
  CHECK(no_frames(c.trace));
  if (!gmp::stacks_available) return;
  CHECK(starts_at(block_at(c.snap, c.live)->frames, kRecordingFile, c.live_line));
  CHECK(starts_at(c.snap.segments.at(0).frames, kRecordingFile, c.alloc_line));
}

TEST_CASE("context=alloc puts the allocating stack on alloc and on the frees of that block") {
  const ContextRun c = run_context(HistoryContext::alloc);
  if (!gmp::stacks_available) {
    CHECK(no_frames(c.trace));
    return;
  }
  const auto allocs = only(c.trace, TraceAction::alloc);
  REQUIRE(allocs.size() == 2);
  CHECK(starts_at(allocs[0].frames, kRecordingFile, c.alloc_line));
  CHECK(starts_at(allocs[1].frames, kRecordingFile, c.live_line));
  const auto seg = only(c.trace, TraceAction::segment_alloc);
  REQUIRE(seg.size() == 1);
  CHECK(seg[0].frames == allocs[0].frames);  // one capture for the whole allocate() call
  const auto fr = only(c.trace, TraceAction::free_requested);
  const auto fc = only(c.trace, TraceAction::free_completed);
  REQUIRE(fr.size() == 1);
  REQUIRE(fc.size() == 1);
  CHECK(fr[0].frames == allocs[0].frames);  // the same stack is one shared object
  CHECK(fc[0].frames == allocs[0].frames);
  CHECK(block_at(c.snap, c.live)->frames == allocs[1].frames);
}

TEST_CASE("context=all also captures the stack of each free") {
  const ContextRun c = run_context(HistoryContext::all);
  if (!gmp::stacks_available) return;
  const auto fr = only(c.trace, TraceAction::free_requested);
  const auto fc = only(c.trace, TraceAction::free_completed);
  REQUIRE(fr.size() == 1);
  REQUIRE(fc.size() == 1);
  CHECK(starts_at(fr[0].frames, kRecordingFile, c.free_line));
  CHECK(fc[0].frames == fr[0].frames);
  CHECK(starts_at(only(c.trace, TraceAction::alloc).at(0).frames, kRecordingFile, c.alloc_line));
}

TEST_CASE("free_requested at deallocate, free_completed once the other stream's work is done") {
  Recorded r({.context = HistoryContext::all});
  auto& a = r.a();
  const gmp::Stream s1(1), s2(2), s3(3);
  const int alloc_line = __LINE__ + 1;  // the next line
  void* p = a.allocate(1 * MiB, s1);
  a.validate();
  a.record_stream(p, s2);
  a.validate();
  const int free_line = __LINE__ + 1;  // the next line
  a.deallocate(p);
  a.validate();
  auto t = r.recorder.trace();
  CHECK(count(t, TraceAction::free_requested) == 1);
  CHECK(count(t, TraceAction::free_completed) == 0);
  {
    const gmp::Snapshot s = gmp::snapshot(a);
    REQUIRE(block_at(s, addr(p)) != nullptr);
    CHECK(block_at(s, addr(p))->state == gmp::BlockState::active_pending_free);
  }
  void* q = a.allocate(512, s3);  // polls events: s2 has not finished
  a.validate();
  CHECK(count(r.recorder.trace(), TraceAction::free_completed) == 0);
  a.backend().complete_events(s2);
  void* q2 = a.allocate(512, s3);  // polls again: now the free completes
  a.validate();
  t = r.recorder.trace();
  const auto fc = only(t, TraceAction::free_completed);
  REQUIRE(fc.size() == 1);
  CHECK(fc[0].addr == addr(p));
  CHECK(fc[0].size == 1 * MiB);
  CHECK(fc[0].stream == 1);
  // Order: ..., free_requested(p), ..., free_completed(p), alloc(q2).
  CHECK(t.back().action == TraceAction::alloc);
  CHECK(t[t.size() - 2].action == TraceAction::free_completed);
  if (gmp::stacks_available) {
    // Completed later, outside deallocate(): PyTorch gives it the allocation's stack.
    CHECK(starts_at(fc[0].frames, kRecordingFile, alloc_line));
    CHECK(starts_at(only(t, TraceAction::free_requested).at(0).frames, kRecordingFile, free_line));
  }
  a.deallocate(q);
  a.validate();
  a.deallocate(q2);
  a.validate();
}

TEST_CASE("empty_cache records segment_free for every released segment") {
  for (const HistoryContext ctx : {HistoryContext::alloc, HistoryContext::all}) {
    Recorded r({.context = ctx});
    auto& a = r.a();
    void* p = a.allocate(1000);
    a.validate();
    void* q = a.allocate(30 * MiB);
    a.validate();
    a.deallocate(p);
    a.validate();
    a.deallocate(q);
    a.validate();
    const int empty_line = __LINE__ + 1;  // the next line
    a.empty_cache();
    a.validate();
    const auto t = r.recorder.trace();
    const auto made = only(t, TraceAction::segment_alloc);
    const auto freed = only(t, TraceAction::segment_free);
    REQUIRE(made.size() == 2);
    REQUIRE(freed.size() == 2);
    CHECK(t.back().action == TraceAction::segment_free);
    for (const auto& f : freed) {
      const auto m = std::find_if(made.begin(), made.end(), [&](const gmp::TraceEntry& e) { return e.addr == f.addr; });
      REQUIRE(m != made.end());
      CHECK(f.size == m->size);
      if (!gmp::stacks_available) continue;
      if (ctx == HistoryContext::all) {
        CHECK(starts_at(f.frames, kRecordingFile, empty_line));
      } else {
        CHECK(f.frames == m->frames);  // the stack that created the segment
      }
    }
    CHECK((made[0].size == 2 * MiB && made[1].size == 30 * MiB));
    CHECK(a.memory_stats().reserved_bytes.all().current == 0);
  }
}

TEST_CASE("An OOM is recorded as an oom entry with the device's free bytes") {
  Recorded r({.context = HistoryContext::alloc}, 64 * MiB);
  auto& a = r.a();
  std::vector<void*> blocks;
  for (int i = 0; i < 30; ++i) {
    blocks.push_back(a.allocate(2 * MiB));
    a.validate();
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    a.deallocate(blocks[i]);
    a.validate();
  }
  const int oom_line = __LINE__ + 1;  // the next line
  CHECK_THROWS_AS((void)a.allocate(4 * MiB), gmp::OutOfMemoryError);
  a.validate();
  const auto t = r.recorder.trace();
  REQUIRE(!t.empty());
  const gmp::TraceEntry& e = t.back();
  CHECK(e.action == TraceAction::oom);
  CHECK(e.addr == 4 * MiB);  // device_free: 64 MiB - 3 segments of 20 MiB
  CHECK(e.size == 4 * MiB);  // the rounded request
  if (gmp::stacks_available) CHECK(starts_at(e.frames, kRecordingFile, oom_line));
  for (std::size_t i = 1; i < blocks.size(); i += 2) {
    a.deallocate(blocks[i]);
    a.validate();
  }
}

TEST_CASE("User metadata is per thread, set or scoped, and lands on the events") {
  Recorded r({.stacks = HistoryStacks::none});
  auto& a = r.a();
  gmp::set_user_metadata("forward");
  CHECK(gmp::user_metadata() == "forward");
  void* p = a.allocate(1000);
  a.validate();
  void* q = nullptr;
  {
    gmp::UserMetadataScope scope("backward");
    CHECK(gmp::user_metadata() == "backward");
    q = a.allocate(2000);
    a.validate();
  }
  CHECK(gmp::user_metadata() == "forward");
  a.deallocate(p);
  a.validate();
  gmp::set_user_metadata("");
  a.deallocate(q);
  a.validate();
  const auto allocs = only(r.recorder.trace(), TraceAction::alloc);
  REQUIRE(allocs.size() == 2);
  CHECK(allocs[0].user_metadata == "forward");
  CHECK(allocs[1].user_metadata == "backward");
  const auto frees = only(r.recorder.trace(), TraceAction::free_requested);
  REQUIRE(frees.size() == 2);
  CHECK(frees[0].user_metadata == "forward");
  CHECK(frees[1].user_metadata.empty());
}

TEST_CASE("enabled=off detaches the recorder and clears everything; on again starts afresh") {
  Recorded r;
  auto& a = r.a();
  CHECK(gmp::history_recorder_of(a) == &r.recorder);
  CHECK(a.event_sink_count() == 1);
  CHECK(r.recorder.enabled());
  void* p = a.allocate(1000);
  a.validate();
  CHECK(!r.recorder.trace().empty());
  r.recorder.set_options({.enabled = HistoryEnabled::off});
  CHECK(a.event_sink_count() == 0);  // recording off: no sink, nothing on the hot path
  CHECK_FALSE(r.recorder.enabled());
  CHECK(r.recorder.trace().empty());
  void* q = a.allocate(2000);  // not recorded
  a.validate();
  r.recorder.set_options({});
  CHECK(gmp::history_recorder_of(a) == &r.recorder);
  CHECK(a.event_sink_count() == 1);
  const gmp::Snapshot s = gmp::snapshot(a);
  REQUIRE(s.device_traces.at(0).size() == 1);
  CHECK(s.device_traces[0][0].action == TraceAction::snapshot);
  CHECK(block_at(s, addr(p))->frames == nullptr);  // its stack belonged to the cleared recording
  CHECK(block_at(s, addr(q))->frames == nullptr);
  a.deallocate(p);
  a.validate();
  a.deallocate(q);
  a.validate();
}

TEST_CASE("clear_history drops the events but keeps the stacks of live blocks") {
  Recorded r;
  auto& a = r.a();
  const int line = __LINE__ + 1;  // the next line
  void* p = a.allocate(1000);
  a.validate();
  r.recorder.set_options({.clear_history = true});
  CHECK(r.recorder.trace().empty());
  const gmp::Snapshot s = gmp::snapshot(a);
  CHECK(s.device_traces.at(0).size() == 1);
  if (gmp::stacks_available) CHECK(starts_at(block_at(s, addr(p))->frames, kRecordingFile, line));
  a.deallocate(p);
  a.validate();
}

TEST_CASE("frames_of resolves a block's context handle") {
  Recorded r;
  auto& a = r.a();
  const int line = __LINE__ + 1;  // the next line
  void* p = a.allocate(1000);
  a.validate();
  const auto segs = a.segments();
  REQUIRE(segs.size() == 1);
  const std::uint64_t context = segs[0].blocks.at(0).context;
  if (gmp::stacks_available) {
    CHECK(context != 0);
    CHECK(starts_at(r.recorder.frames_of(context), kRecordingFile, line));
  }
  CHECK(r.recorder.frames_of(0) == nullptr);
  a.deallocate(p);
  a.validate();
}
