// Expandable segments (PyTorch's policy) with history on: the recorder sees every map and unmap
// as segment_map / segment_unmap entries with PyTorch's addresses and sizes (the pages), alone
// and while three threads on their own streams allocate, free and empty the cache under a
// sampler reading the gauges.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/profiler/sampler.hpp"
#include "history_util.hpp"

using gmp::TraceAction;

TEST_CASE("expandable segments: the live allocator records segment_map and segment_unmap") {
  Recorded r({}, 2 * GiB, "expandable_segments:True");
  auto& a = r.a();
  void* p = a.allocate(3 * MiB);   // maps one 20 MiB page at the reservation's start
  void* q = a.allocate(30 * MiB);  // and one more, after it (the request ends 13 MiB into it)
  a.deallocate(p);
  a.deallocate(q);
  a.empty_cache();  // the free block's whole pages go back: one unmap of 40 MiB
  const auto maps = only(r.recorder.trace(), TraceAction::segment_map);
  const auto unmaps = only(r.recorder.trace(), TraceAction::segment_unmap);
  REQUIRE(maps.size() == 2);
  REQUIRE(unmaps.size() == 1);
  CHECK(maps[0].addr == reinterpret_cast<std::uintptr_t>(p));
  CHECK(maps[0].size == 20 * MiB);
  CHECK(maps[1].addr == maps[0].addr + 20 * MiB);
  CHECK(maps[1].size == 20 * MiB);
  CHECK(unmaps[0].addr == maps[0].addr);
  CHECK(unmaps[0].size == 40 * MiB);
  CHECK(count(r.recorder.trace(), TraceAction::segment_alloc) == 0);  // no cudaMalloc
  const gmp::MemoryStats st = a.memory_stats();
  CHECK(st.num_device_alloc == 2);
  CHECK(st.num_device_free == 1);
  a.validate();
}

TEST_CASE("expandable segments, three streams, history and a sampler at once") {
  constexpr int kThreads = 3;  // streams 1-3: three large-pool reservations (requests > 1 MiB)
  Recorded r({}, 2 * GiB, "expandable_segments:True");
  auto& a = r.a();
  std::atomic<int> errors{0};  // Catch2's assertions are not thread-safe: count, check after
  gmp::PeriodicSampler sampler;
  std::atomic<int> samples{0};
  sampler.start(std::chrono::microseconds(200), [&] {
    const gmp::AllocatorGauges g = a.gauges();
    if (g.allocated_bytes > g.reserved_bytes || g.allocated_bytes < 0 || g.reserved_bytes % (2 * iMiB) != 0) ++errors;
    ++samples;
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&a, &errors, t] {
      try {
        std::mt19937 rng(static_cast<unsigned>(t) + 1);
        const gmp::Stream mine(static_cast<std::uintptr_t>(t + 1));
        std::vector<void*> live;
        for (int i = 0; i < 300; ++i) {
          live.push_back(a.allocate(MiB + 512 + rng() % (24 * MiB), mine));
          if (rng() % 7 == 0) a.record_stream(live.back(), gmp::Stream(static_cast<std::uintptr_t>(1 + (t + 1) % 3)));
          if (live.size() > 6 || rng() % 3 == 0) {
            const std::size_t k = rng() % live.size();
            a.deallocate(live[k]);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          }
          if (t == 0 && i % 50 == 49) a.empty_cache();  // unmaps, on every stream
        }
        for (void* p : live) a.deallocate(p);
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& w : workers) w.join();
  a.backend().complete_all_events();
  a.empty_cache();
  sampler.stop();
  a.validate();
  CHECK(errors.load() == 0);
  CHECK(samples.load() > 0);
  const auto t = r.recorder.trace();
  const gmp::MemoryStats st = a.memory_stats();
  CHECK(count(t, TraceAction::alloc) == kThreads * 300);
  CHECK(count(t, TraceAction::segment_map) == static_cast<std::size_t>(st.num_device_alloc));
  CHECK(count(t, TraceAction::segment_unmap) == static_cast<std::size_t>(st.num_device_free));
  CHECK(st.num_device_free > 0);
  CHECK(st.reserved_bytes.all().current == 0);  // everything unmapped at the end
  CHECK(st.segment.all().peak == 0);            // PyTorch counts no expandable segment
  std::int64_t mapped = 0;                      // the entries account for every byte mapped and unmapped
  for (const auto& e : t) {
    if (e.action == TraceAction::segment_map) mapped += static_cast<std::int64_t>(e.size);
    if (e.action == TraceAction::segment_unmap) mapped -= static_cast<std::int64_t>(e.size);
    if (e.action == TraceAction::segment_map || e.action == TraceAction::segment_unmap) {
      if (e.size % (20 * MiB) != 0) ++errors;  // the large pool's pages
    }
  }
  CHECK(mapped == 0);
  CHECK(errors.load() == 0);
}
