// The allocator's event sinks and with_lock().
#include <algorithm>
#include <atomic>
#include <chrono>
#include <span>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

namespace {

struct Log {
  std::vector<gmp::AllocatorEvent> events;
  std::size_t batches = 0;
  std::atomic<std::uint64_t> next_handle{100};  // prepare runs on several threads at once
  static void on_events(void* user, std::span<const gmp::AllocatorEvent> batch) noexcept {
    auto* self = static_cast<Log*>(user);
    self->events.insert(self->events.end(), batch.begin(), batch.end());
    ++self->batches;
  }
  // A handle per allocating call (its segment and its block share it).
  static std::uint64_t prepare(void* user, gmp::TraceAction call) noexcept {
    return call == gmp::TraceAction::alloc ? static_cast<Log*>(user)->next_handle.fetch_add(1) : 0;
  }
  [[nodiscard]] gmp::AllocatorEventSink sink() { return {&Log::on_events, this, &Log::prepare}; }
};

}  // namespace

TEST_CASE("event sinks: every event, context handles kept with blocks and segments") {
  SimAlloc s;
  Log log;
  const std::size_t slot = s.a.add_event_sink(log.sink());
  CHECK(s.a.event_sink_count() == 1);
  void* p = s.a.allocate(1000);
  s.a.validate();
  CHECK(log.events.empty());  // buffered: told in batches, or when a reader asks
  s.a.flush_events();
  REQUIRE(log.events.size() == 2);
  CHECK(log.events[0].action == gmp::TraceAction::segment_alloc);
  CHECK(log.events[0].size == 2 * MiB);
  CHECK(log.events[1].action == gmp::TraceAction::alloc);
  CHECK(log.events[1].size == 1000);
  const auto segs = s.a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].context == 100);
  CHECK(segs[0].blocks.at(0).context == 100);
  CHECK(log.events[1].prepared == 100);
  CHECK(log.events[0].stamp <= log.events[1].stamp);
  s.a.deallocate(p);
  s.a.validate();
  s.a.flush_events();
  REQUIRE(log.events.size() == 4);
  CHECK(log.events[2].action == gmp::TraceAction::free_requested);
  CHECK(log.events[2].context == 100);
  CHECK(log.events[2].prepared == 0);  // prepare gave no handle for a free
  CHECK(log.events[3].action == gmp::TraceAction::free_completed);
  s.a.empty_cache();
  s.a.flush_events();
  REQUIRE(log.events.size() == 5);
  CHECK(log.events[4].action == gmp::TraceAction::segment_free);
  CHECK(log.events[4].context == 100);
  s.a.remove_event_sink(slot);
  CHECK(s.a.event_sink_count() == 0);
  s.a.deallocate(s.a.allocate(1000));
  s.a.flush_events();
  CHECK(log.events.size() == 5);  // removed: never called again
  s.a.validate();
}

// A sink that stops in its first event until released: were any allocator lock held there,
// another thread on the same stream, a stats reader and a segment reader would wait for it.
TEST_CASE("event sinks: no allocator lock is held while a sink runs") {
  struct Stopper {
    std::atomic<bool> inside{false};
    std::atomic<bool> release{false};
    static void on_events(void* user, std::span<const gmp::AllocatorEvent>) noexcept {
      auto* self = static_cast<Stopper*>(user);
      if (self->inside.exchange(true)) return;
      while (!self->release.load()) std::this_thread::yield();
    }
    static std::uint64_t prepare(void* user, gmp::TraceAction) noexcept {
      auto* self = static_cast<Stopper*>(user);  // after the first event: no lock either
      return self->inside.load() ? 7 : 0;
    }
  } stopper;
  SimAlloc s;
  const std::size_t slot = s.a.add_event_sink({&Stopper::on_events, &stopper, &Stopper::prepare});
  std::thread stopped([&] {
    s.a.deallocate(s.a.allocate(1000));
    s.a.flush_events();
  });
  while (!stopper.inside.load()) std::this_thread::yield();
  std::atomic<bool> done{false};
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) s.a.deallocate(s.a.allocate(512));
    (void)s.a.memory_stats();
    (void)s.a.segments();
    s.a.empty_cache();
    done.store(true);
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  CHECK(done.load());
  stopper.release.store(true);
  stopped.join();
  other.join();
  s.a.remove_event_sink(slot);
  s.a.validate();
}

// Batches: a thread's calls deliver once its lane holds EventLane::kDeliverAt events, in the
// allocator's order across streams (stamps), and nothing is lost past a full lane.
TEST_CASE("event sinks: batched delivery keeps the serial order of every stream") {
  SimAlloc s;
  Log log;
  const std::size_t slot = s.a.add_event_sink(log.sink());
  constexpr int kPairs = 1000;  // 3 events each: several batches, and more than a lane holds
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&s, t] {
      const gmp::Stream stream(static_cast<std::uintptr_t>(t) + 1);
      for (int i = 0; i < kPairs; ++i) s.a.deallocate(s.a.allocate(512 + 512 * static_cast<std::size_t>(t), stream));
    });
  }
  for (auto& th : threads) th.join();
  CHECK(log.events.size() >= gmp::detail::EventLane::kDeliverAt);  // delivered without a reader
  s.a.flush_events();
  std::size_t allocs = 0;
  std::size_t out_of_order = 0;
  for (std::size_t i = 1; i < log.events.size(); ++i) out_of_order += log.events[i - 1].stamp > log.events[i].stamp;
  for (const auto& e : log.events) allocs += e.action == gmp::TraceAction::alloc ? 1 : 0;
  CHECK(out_of_order == 0);
  CHECK(allocs == 3 * kPairs);
  s.a.remove_event_sink(slot);
  s.a.validate();
}

// One stream's events reach a sink in batches (one call each), not one call per event.
TEST_CASE("event sinks: one stream's events arrive in batches") {
  SimAlloc s;
  Log log;
  const std::size_t slot = s.a.add_event_sink(log.sink());
  constexpr std::size_t kPairs = 1000;
  s.a.deallocate(s.a.allocate(512));  // the segment: 4 events before the pairs
  for (std::size_t i = 0; i < kPairs; ++i) s.a.deallocate(s.a.allocate(512));
  s.a.flush_events();
  REQUIRE(log.events.size() == 3 * kPairs + 4);
  // A delivery every kDeliverAt events of the stream, the last by the flush; the segment's
  // events (another lane) may split the first into two calls.
  CHECK(log.batches <= log.events.size() / gmp::detail::EventLane::kDeliverAt + 2);
  s.a.remove_event_sink(slot);
}

// replace_event_sink: the events before go to the old sink, those after to the new one; a sink
// without `prepare` gives handle 0.
TEST_CASE("event sinks: a replaced sink loses no event and prepares no more") {
  SimAlloc s;
  Log before;
  Log after;
  const std::size_t slot = s.a.add_event_sink(before.sink());
  void* p = s.a.allocate(1000);
  s.a.replace_event_sink(slot, {&Log::on_events, &after, nullptr});
  CHECK(s.a.event_sink_count() == 1);
  void* q = s.a.allocate(1000);
  s.a.deallocate(p);
  s.a.deallocate(q);
  s.a.flush_events();
  REQUIRE(before.events.size() == 2);  // segment_alloc, alloc
  CHECK(before.events[1].prepared == 100);
  REQUIRE(after.events.size() == 5);  // alloc, then two frees of 2 events
  CHECK(after.events[0].action == gmp::TraceAction::alloc);
  CHECK(after.events[0].prepared == 0);
  CHECK(after.events[1].context == 100);  // p's handle, kept with its block
  CHECK_THROWS_AS(s.a.replace_event_sink(gmp::detail::EventSinks::capacity, after.sink()), std::out_of_range);
  CHECK_THROWS_AS(s.a.replace_event_sink(slot, {}), std::invalid_argument);
  CHECK(s.a.event_sink_count() == 1);
  s.a.remove_event_sink(slot);
  s.a.validate();
}

namespace {
struct Stamped {
  std::uint64_t stamp;
  int id;
};
}  // namespace

// The merge of per-stream runs: stamp order, equal stamps in run order, records at or after the
// cut kept for the next merge; consecutive records of one run come as one span.
TEST_CASE("event sinks: runs merge in spans by stamp, ties in run order") {
  using Run = gmp::detail::StampedRun<Stamped>;
  Run a;
  Run b;
  Run c;
  a.records = {{1, 10}, {2, 11}, {3, 12}, {5, 13}, {9, 14}};
  b.records = {{3, 20}, {4, 21}, {8, 22}};
  c.records = {{3, 30}, {7, 31}};
  std::vector<Run*> runs{&a, &b, &c};
  std::vector<int> order;
  std::vector<std::size_t> spans;
  gmp::detail::merge_spans_by_stamp(runs, 8, [&](const Stamped* first, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) order.push_back(first[i].id);
    spans.push_back(n);
  });
  CHECK(order == std::vector<int>{10, 11, 12, 20, 30, 21, 13, 31});
  CHECK(spans == std::vector<std::size_t>{3, 1, 1, 1, 1, 1});
  CHECK(runs.empty());
  REQUIRE(a.records.size() == 1);  // stamps 9 and 8: not before the cut
  CHECK(a.records[0].id == 14);
  REQUIRE(b.records.size() == 1);
  CHECK(b.records[0].id == 22);
  CHECK(c.records.empty());
}

// The same merge against its definition, on runs interleaved as threads on different streams
// interleave them (record by record, with equal stamps and long stretches too): the order is a
// stable sort by stamp in run order, each span is a maximal stretch of one run in that order, and
// each run keeps exactly its records at or after the cut.
TEST_CASE("event sinks: merged runs equal a stable sort by stamp, spans maximal") {
  using Run = gmp::detail::StampedRun<Stamped>;
  std::uint64_t seed = 12345;
  auto next = [&seed](std::uint64_t n) {  // a small LCG: the same sequence everywhere
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  for (int round = 0; round < 300; ++round) {
    const std::size_t k = 1 + next(9);
    std::vector<Run> runs(k);
    std::vector<std::pair<std::uint64_t, int>> all;  // (stamp, id); id = run * 10000 + index
    for (std::size_t r = 0; r < k; ++r) {
      std::uint64_t stamp = next(4);
      const std::size_t n = 1 + next(round % 3 == 0 ? 200 : 12);
      for (std::size_t i = 0; i < n; ++i) {
        stamp += next(round % 2 == 0 ? 3 : 40);  // equal stamps within a run, and across runs
        runs[r].records.push_back({stamp, static_cast<int>(r * 10000 + i)});
      }
    }
    const std::uint64_t cut = 1 + next(round % 5 == 0 ? 100000 : 2000);
    std::vector<Run*> list;
    std::size_t total = 0;
    for (std::size_t r = 0; r < k; ++r) {
      total += runs[r].records.size();
      for (const auto& x : runs[r].records) {
        if (x.stamp < cut) all.emplace_back(x.stamp, x.id);
      }
      if (runs[r].has_before(cut)) list.push_back(&runs[r]);
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second / 10000 < b.second / 10000;
    });
    std::vector<int> order;
    std::vector<int> span_run;
    gmp::detail::merge_spans_by_stamp(list, cut, [&](const Stamped* first, std::size_t n) {
      REQUIRE(n > 0);
      span_run.push_back(first[0].id / 10000);
      for (std::size_t i = 0; i < n; ++i) order.push_back(first[i].id);
    });
    CHECK(list.empty());
    std::vector<int> expected;
    for (const auto& e : all) expected.push_back(e.second);
    REQUIRE(order == expected);
    for (std::size_t i = 1; i < span_run.size(); ++i) CHECK(span_run[i] != span_run[i - 1]);  // maximal spans
    std::size_t kept = 0;
    for (const Run& r : runs) {
      kept += r.records.size();
      for (const auto& x : r.records) CHECK(x.stamp >= cut);
    }
    CHECK(kept == total - expected.size());
  }
}

TEST_CASE("event sinks: a fixed number of slots; a full set is one clear error") {
  SimAlloc s;
  std::vector<Log> logs(gmp::detail::EventSinks::capacity + 1);
  for (std::size_t i = 0; i < gmp::detail::EventSinks::capacity; ++i) s.a.add_event_sink(logs[i].sink());
  CHECK_THROWS_AS(s.a.add_event_sink(logs.back().sink()), std::length_error);
  CHECK_THROWS_AS(s.a.add_event_sink({}), std::invalid_argument);
  s.a.remove_event_sink(99);  // unknown slot: ignored
  s.a.deallocate(s.a.allocate(1000));
  s.a.flush_events();
  for (std::size_t i = 0; i < gmp::detail::EventSinks::capacity; ++i) CHECK(logs[i].events.size() == 4);
  CHECK(logs.back().events.empty());
  s.a.validate();
}

TEST_CASE("with_lock: segments and stats read at one instant") {
  SimAlloc s;
  void* p = s.a.allocate(3 * MiB);
  void* q = s.a.allocate(600);
  const auto [segments, reserved] = s.a.with_lock([](const SimAllocator::LockedView& v) {
    std::size_t n = 0;
    std::size_t bytes = 0;
    v.visit_segments([&](const gmp::SegmentView& seg) {
      ++n;
      bytes += seg.size;
    });
    return std::pair{n, bytes};
  });
  CHECK(segments == 2);
  CHECK(reserved == 22 * MiB);  // a 20 MiB large segment and a 2 MiB small one
  CHECK(static_cast<std::size_t>(s.a.with_lock([](const auto& v) { return v.stats().reserved_bytes.all().current; })) ==
        reserved);
  s.a.deallocate(p);
  s.a.deallocate(q);
  s.a.validate();
}
