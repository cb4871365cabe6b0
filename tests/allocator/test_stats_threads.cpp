// Statistics under threads: the per-shard journals fold into the values and peaks of one serial
// order of the operations, consistent with real time (stats_ledger.hpp).
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/stats_ledger.hpp"
#include "sim_allocator.hpp"

namespace {
// Sizes of the small pool (multiples of 512 B up to 512 KiB): after one warm-up block per stream,
// every request is served from the stream's cached 2 MiB segment, by the hot path.
std::size_t round_size(std::mt19937_64& rng) { return 512 * (1 + rng() % 1024); }

// Two threads on streams 1 and 2 run `rounds` rounds, kept in step by a barrier. overlap: A
// allocates, then B allocates, then both free (both blocks live at once); else A allocates and
// frees before B does. Returns the allocated-bytes peak that the real-time order gives; opens
// peak window `window` when the rounds start.
std::int64_t run_rounds(SimAlloc& s, int rounds, bool overlap, std::uint64_t& window) {
  const gmp::Stream streams[2] = {gmp::Stream(1), gmp::Stream(2)};
  for (const gmp::Stream st : streams) s.a.deallocate(s.a.allocate(512 * KiB, st));  // warm-up segments
  std::mt19937_64 rng(overlap ? 11 : 12);
  std::vector<std::size_t> sizes[2];
  std::int64_t expect = 0;
  for (int i = 0; i < rounds; ++i) {
    const std::size_t x = round_size(rng), y = round_size(rng);
    sizes[0].push_back(x);
    sizes[1].push_back(y);
    expect = std::max(expect, static_cast<std::int64_t>(overlap ? x + y : std::max(x, y)));
  }
  s.a.reset_peak_memory_stats();
  window = s.a.open_peak_window();
  std::barrier step(2);
  auto worker = [&](int t) {
    for (int i = 0; i < rounds; ++i) {
      void* p = nullptr;
      if (t == 0) p = s.a.allocate(sizes[0][static_cast<std::size_t>(i)], streams[0]);
      if (t == 0 && !overlap) s.a.deallocate(p);
      step.arrive_and_wait();
      if (t == 1) p = s.a.allocate(sizes[1][static_cast<std::size_t>(i)], streams[1]);
      step.arrive_and_wait();
      if (overlap || t == 1) s.a.deallocate(p);
      step.arrive_and_wait();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  return expect;
}
}  // namespace

TEST_CASE("peaks from threads on their own streams are those of the real-time order") {
  for (const bool overlap : {true, false}) {
    // 600 rounds: each shard's journal fills and is folded (by the workers) several times.
    for (const int rounds : {1, 600}) {
      SimAlloc s;
      std::uint64_t window = 0;
      const std::int64_t expect = run_rounds(s, rounds, overlap, window);
      INFO("overlap " << overlap << ", rounds " << rounds);
      const auto st = s.stats();
      CHECK(st.allocated_bytes.all().peak == expect);
      CHECK(st.allocated_bytes[gmp::StatPool::small_pool].peak == expect);
      CHECK(st.allocation.all().peak == (overlap ? 2 : 1));
      CHECK(st.allocated_bytes.all().current == 0);
      CHECK(s.a.close_peak_window(window) == expect);
      s.a.validate();
    }
  }
}

TEST_CASE("stats after threads on own streams and on one stream equal the serial recount") {
  for (const int own_streams : {4, 0}) {
    SimAlloc s;
    std::vector<std::thread> workers;
    std::mutex handoff_mutex;
    std::vector<void*> handoff;
    constexpr int iterations = 2000;
    for (int t = 0; t < 4; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 rng(static_cast<unsigned>(t) + 1u);
        const gmp::Stream stream(t < own_streams ? static_cast<std::uintptr_t>(t) + 1 : 7);
        std::vector<void*> mine;
        for (int i = 0; i < iterations; ++i) {
          if (mine.size() < 8 && (mine.empty() || rng() % 2 != 0)) {
            mine.push_back(s.a.allocate(round_size(rng), stream));
          } else {
            s.a.deallocate(mine.back());
            mine.pop_back();
          }
        }
        // What a worker still holds is freed by the next one to finish: another thread.
        std::lock_guard lock(handoff_mutex);
        for (void* p : handoff) s.a.deallocate(p);
        handoff = mine;
      });
    }
    for (auto& w : workers) w.join();
    s.a.validate();  // every current value recounted from the blocks
    const auto st = s.stats();
    CHECK(st.allocation.all().current <= 8);
    CHECK(st.allocation.all().allocated - st.allocation.all().freed == st.allocation.all().current);
    CHECK(st.allocation.all().peak <= 4 * 8);
    const auto g = s.a.gauges();
    CHECK(g.total_allocations == static_cast<std::uint64_t>(st.allocation.all().allocated));
    CHECK(g.total_frees == static_cast<std::uint64_t>(st.allocation.all().freed));
    CHECK(g.allocations == st.allocation.all().current);
  }
}

TEST_CASE("gauges() read during traffic on several streams are never torn") {
  SimAlloc s;
  std::atomic<bool> stop{false};
  std::atomic<int> readings{0};
  std::thread reader([&] {
    std::uint64_t last_total = 0;
    while (!stop.load()) {
      const auto g = s.a.gauges();
      CHECK(g.allocated_bytes <= g.reserved_bytes);
      CHECK(g.requested_bytes <= g.allocated_bytes);
      CHECK(g.allocated_bytes <= g.active_bytes);
      CHECK(g.total_allocations - g.total_frees == static_cast<std::uint64_t>(g.allocations));
      CHECK(g.total_allocations >= last_total);  // a later reading never goes back in time
      last_total = g.total_allocations;
      readings.fetch_add(1);
    }
  });
  while (readings.load() == 0) std::this_thread::yield();
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t) + 5u);
      const gmp::Stream stream(static_cast<std::uintptr_t>(t) + 1);
      std::vector<void*> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.size() < 6 && (mine.empty() || rng() % 2 != 0)) {
          mine.push_back(s.a.allocate(round_size(rng), stream));
        } else {
          s.a.deallocate(mine.back());
          mine.pop_back();
        }
      }
      for (void* p : mine) s.a.deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  const int seen = readings.load();
  while (readings.load() < seen + 2) std::this_thread::yield();  // readings after the last free
  stop = true;
  reader.join();
  const auto g = s.a.gauges();
  CHECK(g.allocations == 0);
  CHECK(g.total_allocations == g.total_frees);
  s.a.validate();
}

// One stream (no journals: its shard's lock orders every operation), a with_lock() reader
// (segments(), as snapshot() and dump_snapshot() do) and a stats reader opening peak windows (a
// profiler's scopes plus its sampler): the everyday setup. Under ThreadSanitizer any access to
// the statistics or the windows outside the protocol is reported; here the readings must also
// stay consistent and the windows' peaks bound every value seen meanwhile. (Catch2's assertions
// are not thread-safe: the readers count what they find wrong, the main thread checks.)
TEST_CASE("one stream with a segments() reader and a stats and peak-window reader") {
  SimAlloc s;
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0}, readings{0}, untiled{0}, inconsistent{0}, low_peaks{0};
  std::thread snapshotter([&] {
    while (!stop.load()) {
      for (const auto& seg : s.a.segments()) {
        std::size_t sum = 0;
        for (const auto& b : seg.blocks) sum += b.size;
        if (sum != seg.size) untiled.fetch_add(1);
      }
      snapshots.fetch_add(1);
    }
  });
  std::thread sampler([&] {
    while (!stop.load()) {
      const std::uint64_t outer = s.a.open_peak_window();
      const auto g = s.a.gauges();
      const std::uint64_t inner = s.a.open_peak_window();  // nested, as profile_context scopes are
      const auto st = s.a.memory_stats();
      if (g.requested_bytes > g.allocated_bytes || g.allocated_bytes > g.reserved_bytes ||
          g.total_allocations - g.total_frees != static_cast<std::uint64_t>(g.allocations) ||
          st.allocated_bytes.all().current > st.allocated_bytes.all().peak) {
        inconsistent.fetch_add(1);
      }
      if (s.a.close_peak_window(inner) < st.allocated_bytes.all().current) low_peaks.fetch_add(1);
      if (s.a.close_peak_window(outer) < std::max(g.allocated_bytes, st.allocated_bytes.all().current)) {
        low_peaks.fetch_add(1);
      }
      readings.fetch_add(1);
    }
  });
  while (snapshots.load() == 0 || readings.load() == 0) std::this_thread::yield();
  std::mt19937_64 rng(21);
  std::vector<void*> mine;
  for (int i = 0; i < 20000; ++i) {  // the default stream
    if (mine.size() < 8 && (mine.empty() || rng() % 2 != 0)) {
      mine.push_back(s.a.allocate(round_size(rng)));
    } else {
      s.a.deallocate(mine.back());
      mine.pop_back();
    }
    if (i % 4000 == 0) {  // readers interleave with the traffic, not only before or after it
      const int a = snapshots.load(), r = readings.load();
      while (snapshots.load() == a || readings.load() == r) std::this_thread::yield();
    }
  }
  for (void* p : mine) s.a.deallocate(p);
  stop = true;
  snapshotter.join();
  sampler.join();
  CHECK(untiled.load() == 0);
  CHECK(inconsistent.load() == 0);
  CHECK(low_peaks.load() == 0);
  const auto g = s.a.gauges();
  CHECK(g.allocations == 0);
  CHECK(g.total_allocations == g.total_frees);
  s.a.validate();
}

// The ledger's switch from direct stats (one stream) to journals (the second stream's first
// allocation) happens while the first stream's thread allocates and frees: every change must land
// exactly once, whichever side of the switch it falls on.
TEST_CASE("a second stream appearing while the first stream's thread runs: no stat change lost or counted twice") {
  SimAlloc s;
  constexpr int kPairs = 20000;
  constexpr int kSecond = 2000;
  std::atomic<bool> running{false};
  std::thread first([&] {
    std::mt19937_64 rng(31);
    void* keep = s.a.allocate(512 * KiB);  // live across the switch
    for (int i = 0; i < kPairs; ++i) {
      s.a.deallocate(s.a.allocate(round_size(rng)));
      if (i == 100) running = true;
    }
    s.a.deallocate(keep);
  });
  while (!running.load()) std::this_thread::yield();
  std::mt19937_64 rng(32);
  for (int i = 0; i < kSecond; ++i) s.a.deallocate(s.a.allocate(round_size(rng), gmp::Stream(7)));
  const auto mid = s.a.gauges();  // a reader during the first thread's traffic
  first.join();
  const auto g = s.a.gauges();
  CHECK(g.total_allocations == kPairs + 1 + kSecond);
  CHECK(g.total_frees == g.total_allocations);
  CHECK(g.allocations == 0);
  CHECK(g.allocated_bytes == 0);
  CHECK(mid.total_allocations - mid.total_frees == static_cast<std::uint64_t>(mid.allocations));
  // At most the kept block and one block of each thread were ever live at once.
  CHECK(s.a.memory_stats().allocated_bytes.all().peak <= static_cast<std::int64_t>(3 * 512 * KiB));
  s.a.validate();  // every current value against its recount from the blocks
}

// The ledger alone, one thread: one lane applies at once, the second switches to journals, and
// read() folds them in stamp order -- values, peaks and peak windows as one serial order.
TEST_CASE("StatsLedger: direct with one lane, journaled from the second, read() exact in both") {
  using gmp::detail::LockGuard;
  using gmp::detail::StatRecord;
  using gmp::detail::StatsLedger;
  StatsLedger ledger(std::size_t{1} << 40, 0);
  auto alloc = [](std::int64_t bytes) {
    StatRecord r;
    r.size = r.requested = bytes;
    r.pool = gmp::StatPool::small_pool;
    return r;
  };
  auto free_of = [&](std::int64_t bytes) {
    StatRecord r = alloc(bytes);
    r.is_free = true;
    return r;
  };
  auto allocated = [&] {
    return ledger.read([](const StatsLedger::State& s) { return s.stats.allocated_bytes.all(); });
  };
  StatsLedger::Lane a, b;
  ledger.add_lane(a);
  {
    LockGuard hold(a.mutex);
    ledger.reserve(a);
    CHECK(ledger.record(a, alloc(512)) == 0);  // direct: applied at once, nothing to fold
  }
  CHECK(allocated().current == 512);
  ledger.add_lane(b);
  const std::uint64_t window =
      ledger.read([](StatsLedger::State& s) { return s.windows.open(s.stats.allocated_bytes.all().current); });
  {
    LockGuard hold(b.mutex);
    ledger.reserve(b);
    CHECK(ledger.record(b, alloc(1024)) == 1);  // journaled: the journal's length
  }
  {
    LockGuard hold(a.mutex);
    ledger.reserve(a);
    CHECK(ledger.record(a, free_of(512)) == 1);
  }
  {
    LockGuard hold(b.mutex);
    ledger.reserve(b);
    CHECK(ledger.record(b, alloc(2048)) == 2);
  }
  // Serial order: +512 (direct), +1024, -512, +2048 -> 3072 live, peak 3072.
  CHECK(allocated().current == 3072);
  CHECK(allocated().peak == 3072);
  CHECK(ledger.read([window](StatsLedger::State& s) { return s.windows.close(window); }) == 3072);
  const auto totals = ledger.read([](const StatsLedger::State& s) { return s.totals; });
  CHECK(totals.allocations == 3);
  CHECK(totals.frees == 1);
  CHECK(totals.allocated_bytes == 512 + 1024 + 2048);
}

// A fold merges the streams' journals and applies their records in stamp order; that must give
// what applying them one by one gives (a ledger with one lane does that, at record time): every
// stat's value, peak, allocated and freed, the lifetime totals and the peak windows, for any
// records -- both pools, oversize blocks, expandable frees, inactive splits either way -- with
// reads (folds) and peak resets at random points.
TEST_CASE("StatsLedger: folds of journals equal applying the records one by one") {
  using gmp::detail::LockGuard;
  using gmp::detail::StatRecord;
  using gmp::detail::StatsLedger;
  const std::size_t max_split = std::size_t{1} << 20;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    StatsLedger one(max_split, 0);      // direct: each record applied as it comes
    StatsLedger batched(max_split, 0);  // journaled: records applied by folds
    StatsLedger::Lane a, b, c;
    one.add_lane(a);
    batched.add_lane(b);
    batched.add_lane(c);
    const std::uint64_t w1 = one.read([](StatsLedger::State& s) { return s.windows.open(0); });
    const std::uint64_t w2 = batched.read([](StatsLedger::State& s) { return s.windows.open(0); });
    auto same = [&] {
      const auto x = one.read([](const StatsLedger::State& s) { return s; });
      const auto y = batched.read([](const StatsLedger::State& s) { return s; });
      CHECK(x.stats.as_map() == y.stats.as_map());
      CHECK(x.totals.allocations == y.totals.allocations);
      CHECK(x.totals.frees == y.totals.frees);
      CHECK(x.totals.allocated_bytes == y.totals.allocated_bytes);
      CHECK(x.totals.freed_bytes == y.totals.freed_bytes);
      CHECK(x.windows.peak(w1) == y.windows.peak(w2));
    };
    const int n = 1 + static_cast<int>(rng() % 600);
    for (int i = 0; i < n; ++i) {
      StatRecord r;
      r.size = static_cast<std::int64_t>((1 + rng() % 4096) * 512);  // up to 2 MiB: some oversize
      r.requested = r.size - static_cast<std::int64_t>(rng() % 512);
      r.pool = rng() % 2 == 0 ? gmp::StatPool::small_pool : gmp::StatPool::large_pool;
      r.is_free = rng() % 2 == 0;
      r.expandable = rng() % 4 == 0;
      r.inactive_bytes = static_cast<std::int64_t>(rng() % 3) - 1;  // -1, 0, +1 (times a size)
      r.inactive_bytes *= static_cast<std::int64_t>(rng() % 8192) * 512;
      r.inactive_blocks = static_cast<std::int32_t>(rng() % 3) - 1;
      {
        LockGuard hold(a.mutex);
        one.reserve(a);
        one.record(a, r);
      }
      StatsLedger::Lane& lane = rng() % 2 == 0 ? b : c;
      {
        LockGuard hold(lane.mutex);
        batched.reserve(lane);
        batched.record(lane, r);
      }
      if (rng() % 97 == 0) same();  // a fold mid-way
      if (rng() % 211 == 0) {
        one.read([](StatsLedger::State& s) { s.stats.reset_peak(); });
        batched.read([](StatsLedger::State& s) { s.stats.reset_peak(); });
      }
    }
    same();
  }
}
