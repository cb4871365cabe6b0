// History on while four threads allocate and free, with snapshots and annotations from a
// fifth: nothing lost, nothing torn, the allocator stays valid.
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "history_util.hpp"

using gmp::TraceAction;

TEST_CASE("History stays exact while 4 threads allocate and free") {
  constexpr int kThreads = 4;
  constexpr int kRounds = 400;
  Recorded r;
  auto& a = r.a();
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0};
  std::atomic<int> errors{0};  // Catch2's assertions are not thread-safe: count, check after
  std::thread observer([&] {
    while (!stop.load()) {
      auto range = gmp::annotate("observer");
      const gmp::Snapshot s = gmp::snapshot(a);
      for (const auto& seg : s.segments) {
        std::uint64_t tiled = 0;
        for (const auto& b : seg.blocks) tiled += b.size;
        if (tiled != seg.total_size) ++errors;
      }
      ++snapshots;
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&a, &errors, &snapshots, t] {
      while (snapshots.load() == 0) std::this_thread::yield();  // start once snapshots are being taken
      gmp::set_user_metadata("worker " + std::to_string(t));
      try {
        std::mt19937 rng(static_cast<unsigned>(t));
        std::vector<void*> live;
        for (int i = 0; i < kRounds; ++i) {
          live.push_back(a.allocate(512 + rng() % (3 * MiB), gmp::Stream(static_cast<std::uintptr_t>(t))));
          a.validate();
          if (live.size() > 8 || rng() % 3 == 0) {
            const std::size_t k = rng() % live.size();
            a.deallocate(live[k]);
            a.validate();
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          }
        }
        for (void* p : live) {
          a.deallocate(p);
          a.validate();
        }
      } catch (const std::exception&) {
        ++errors;
      }
      gmp::set_user_metadata("");
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  observer.join();
  a.validate();
  CHECK(errors.load() == 0);
  CHECK(snapshots.load() > 0);

  const auto t = r.recorder.trace();
  const gmp::MemoryStats stats = a.memory_stats();
  const std::size_t allocs = kThreads * kRounds;
  CHECK(count(t, TraceAction::alloc) == allocs);
  CHECK(count(t, TraceAction::free_requested) == allocs);
  CHECK(count(t, TraceAction::free_completed) == allocs);
  CHECK(count(t, TraceAction::segment_alloc) == static_cast<std::size_t>(stats.num_device_alloc));
  CHECK(count(t, TraceAction::snapshot) == static_cast<std::size_t>(snapshots.load()));
  std::map<std::string, std::size_t> per_thread;
  for (const auto& e : only(t, TraceAction::alloc)) ++per_thread[e.user_metadata];
  for (int k = 0; k < kThreads; ++k) CHECK(per_thread["worker " + std::to_string(k)] == kRounds);
  // Per thread (= per stream here), every allocation is freed once, in a consistent order.
  std::map<std::uint64_t, int> live;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i > 0) CHECK(t[i].time_us >= t[i - 1].time_us);
    if (t[i].action == TraceAction::alloc) CHECK(++live[t[i].addr] == 1);
    if (t[i].action == TraceAction::free_completed) CHECK(--live[t[i].addr] == 0);
    if (gmp::stacks_available && t[i].action == TraceAction::alloc) CHECK(t[i].frames != nullptr);
  }
  CHECK(r.recorder.annotations().size() == 2 * static_cast<std::size_t>(snapshots.load()));
}
