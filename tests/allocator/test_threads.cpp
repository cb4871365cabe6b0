// Any number of threads allocate and free at once; the allocator stays consistent.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

TEST_CASE("8 threads allocate and free concurrently; validate() passes throughout") {
  SimAlloc s;
  constexpr int threads = 8;
  constexpr int iterations = 3000;
  std::atomic<bool> stop_validator{false};
  std::atomic<int> validations{0};
  std::thread validator([&] {
    while (!stop_validator.load()) {
      s.a.validate();
      validations.fetch_add(1);
      // Leave the lock to the workers most of the time (a tight loop would starve them).
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::vector<std::thread> workers;
  std::atomic<std::size_t> total{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t) * 7919u + 1u);
      std::vector<void*> mine;
      const gmp::Stream stream(static_cast<std::uintptr_t>(t % 3));
      for (int i = 0; i < iterations; ++i) {
        if (mine.empty() || rng() % 2 != 0) {
          // log-uniform sizes from 1 B to 32 MiB: both pools, splits and new segments
          const std::size_t bytes = std::size_t{1} << (rng() % 25);
          mine.push_back(s.a.allocate(bytes + rng() % bytes, stream));
          total.fetch_add(1);
        } else {
          const std::size_t k = rng() % mine.size();
          s.a.deallocate(mine[k]);
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (void* p : mine) s.a.deallocate(p);
    });
  }
  for (auto& w : workers) w.join();
  stop_validator = true;
  validator.join();
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.allocation.all().current == 0);
  CHECK(st.allocated_bytes.all().current == 0);
  CHECK(static_cast<std::size_t>(st.allocation.all().allocated) == total.load());
  CHECK(validations.load() > 0);
}

namespace {
// What one worker still holds, and what it did.
struct WorkerTally {
  std::int64_t live_count = 0;
  std::int64_t live_requested = 0;
  std::int64_t max_live_requested = 0;         // this worker's own peak: a lower bound of the global one
  std::int64_t sum_of_max_live_requested = 0;  // (summed) an upper bound of the global one
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
  std::int64_t ooms = 0;
};

// `threads` workers; worker t uses stream t+1 when t < own_streams, else all share stream 0.
// Sizes: mostly small-pool, some large (up to 24 MiB); some blocks are recorded on another
// worker's stream before being freed (with `record`). Each worker keeps its last few blocks.
WorkerTally run_workers(SimAlloc& s, int threads, int own_streams, int iterations, bool record) {
  std::vector<WorkerTally> tallies(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      WorkerTally& tally = tallies[static_cast<std::size_t>(t)];
      std::mt19937_64 rng(static_cast<unsigned>(t) * 104729u + 17u);
      const gmp::Stream stream(t < own_streams ? static_cast<std::uintptr_t>(t) + 1 : 0);
      std::vector<std::pair<void*, std::size_t>> mine;
      auto free_one = [&](std::size_t k) {
        if (record && rng() % 8 == 0)
          s.a.record_stream(mine[k].first, gmp::Stream(static_cast<std::uintptr_t>(rng() % 5)));
        s.a.deallocate(mine[k].first);
        tally.live_count -= 1;
        tally.live_requested -= static_cast<std::int64_t>(mine[k].second);
        ++tally.frees;
        mine[k] = mine.back();
        mine.pop_back();
      };
      for (int i = 0; i < iterations; ++i) {
        if (mine.size() < 24 && (mine.empty() || rng() % 2 != 0)) {
          const std::size_t bytes = rng() % 10 == 0 ? 1 + rng() % (24 * MiB) : 1 + rng() % (768 * KiB);
          try {
            mine.emplace_back(s.a.allocate(bytes, stream), bytes);
          } catch (const gmp::OutOfMemoryError&) {
            ++tally.ooms;
            continue;
          }
          ++tally.allocations;
          tally.live_count += 1;
          tally.live_requested += static_cast<std::int64_t>(bytes);
          tally.max_live_requested = std::max(tally.max_live_requested, tally.live_requested);
        } else {
          free_one(rng() % mine.size());
        }
      }
      while (mine.size() > 3) free_one(mine.size() - 1);
    });
  }
  for (auto& w : workers) w.join();
  WorkerTally sum;
  for (const auto& t : tallies) {
    sum.live_count += t.live_count;
    sum.live_requested += t.live_requested;
    sum.max_live_requested = std::max(sum.max_live_requested, t.max_live_requested);
    sum.sum_of_max_live_requested += t.max_live_requested;
    sum.allocations += t.allocations;
    sum.frees += t.frees;
    sum.ooms += t.ooms;
  }
  return sum;
}
}  // namespace

TEST_CASE("threads on own and shared streams, with record_stream, empty_cache, stats and snapshots meanwhile") {
  SimAlloc s("", 160 * MiB, /*auto_complete_events=*/true);  // small: some requests run out of memory
  std::atomic<bool> stop{false};
  std::atomic<int> observations{0};
  std::thread observer([&] {  // everything that is not the hot path, concurrently with it
    int i = 0;
    while (!stop.load()) {
      const auto st = s.a.memory_stats();
      CHECK(st.allocated_bytes.all().peak >= st.allocated_bytes.all().current);
      const auto g = s.a.gauges();
      CHECK(g.total_allocations >= g.total_frees);
      switch (i++ % 4) {
        case 0: s.a.empty_cache(); break;
        case 1: (void)s.a.segments(); break;
        case 2: s.a.reset_peak_memory_stats(); break;
        default: s.a.validate(); break;
      }
      observations.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  // The workers start once the observer has made a pass: on a loaded machine they could
  // otherwise finish before it ran at all.
  while (observations.load() == 0) std::this_thread::yield();
  const WorkerTally sum = run_workers(s, 6, 4, 1200, true);
  stop = true;
  observer.join();
  s.a.validate();
  s.a.empty_cache();  // frees the blocks still waiting for events on other streams
  const auto st = s.stats();
  // The serial recount: what the workers still hold, and what they did.
  CHECK(st.allocation.all().current == sum.live_count);
  CHECK(st.requested_bytes.all().current == sum.live_requested);
  CHECK(st.allocation.all().allocated == sum.allocations);
  CHECK(st.allocation.all().freed == sum.frees);
  CHECK(st.num_ooms == sum.ooms);
  const auto g = s.a.gauges();
  CHECK(g.allocations == sum.live_count);
  CHECK(g.requested_bytes == sum.live_requested);
  CHECK(g.allocated_bytes == st.allocated_bytes.all().current);
  CHECK(g.total_allocations == static_cast<std::uint64_t>(sum.allocations));
  CHECK(g.total_frees == static_cast<std::uint64_t>(sum.frees));
  s.a.validate();
}

TEST_CASE("peaks under threads lie between the largest worker's own peak and the sum of all") {
  SimAlloc s;
  const int threads = 4;
  const WorkerTally sum = run_workers(s, threads, 2, 1500, false);  // two own streams, two sharing one
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.allocation.all().current == sum.live_count);
  CHECK(st.requested_bytes.all().current == sum.live_requested);
  CHECK(st.requested_bytes.all().peak >= sum.max_live_requested);
  CHECK(st.requested_bytes.all().peak <= sum.sum_of_max_live_requested);
  CHECK(st.allocated_bytes.all().peak >= st.requested_bytes.all().peak);
  // No serial order can exceed every worker at its own peak at once (each holds <= 24 blocks).
  CHECK(st.allocation.all().peak <= 24 * threads);
  CHECK(sum.ooms == 0);
}

TEST_CASE("more streams than the lock-free shard table: the locked fallback, from two threads") {
  SimAlloc s;
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        std::vector<void*> held;
        // 2 x 20 streams: past the 16 lock-free slots, and below ThreadSanitizer's 64 locks
        // held at once (validate() holds every shard's).
        for (std::uintptr_t stream = 1; stream <= 20; ++stream) {
          held.push_back(s.a.allocate(1 + (stream * 4096 + static_cast<std::uintptr_t>(t)) % (3 * MiB),
                                      gmp::Stream(stream * 2 + static_cast<std::uintptr_t>(t))));
        }
        for (void* p : held) s.a.deallocate(p);
      }
    });
  }
  for (auto& w : workers) w.join();
  s.a.validate();
  CHECK(s.stats().allocation.all().current == 0);
  CHECK(s.stats().allocation.all().allocated == 2 * 3 * 20);
}
