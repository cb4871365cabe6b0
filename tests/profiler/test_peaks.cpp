// Per-interval peaks: nested scopes and concurrent scopes on two threads each report the peak
// of their own interval, and the allocator's global peak is never reset by profiling.
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "profiler_test_util.hpp"

namespace {

gmp::ProfileResult result_named(const gmp::GPUMemoryProfiler& p, const std::string& name) {
  for (const auto& r : p.results()) {
    if (r.name == name) return r;
  }
  FAIL("no result named " << name);
  return {};
}

}  // namespace

TEST_CASE("peaks: nested scopes each get the peak of their own interval") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  {
    auto outer = profiler.profile_context("outer");
    void* a = d.alloc(10 * MiB);
    {
      auto inner = profiler.profile_context("inner");
      d.free(d.alloc(20 * MiB));  // 30 MiB inside both
    }
    void* c = d.alloc(5 * MiB);  // 15 MiB: after inner, inside outer
    {
      auto late = profiler.profile_context("late_inner");
      d.free(d.alloc(1 * MiB));  // 16 MiB
    }
    d.free(a);
    d.free(c);
  }
  {
    auto high_then_low = profiler.profile_context("outer2");
    d.free(d.alloc(40 * MiB));
    auto low = profiler.profile_context("inner2");
    d.free(d.alloc(4 * MiB));
  }
  CHECK(result_named(profiler, "inner").peak_memory_usage() == 30 * iMiB);
  CHECK(result_named(profiler, "late_inner").peak_memory_usage() == 16 * iMiB);
  CHECK(result_named(profiler, "outer").peak_memory_usage() == 30 * iMiB);
  CHECK(result_named(profiler, "inner2").peak_memory_usage() == 4 * iMiB);
  CHECK(result_named(profiler, "outer2").peak_memory_usage() == 40 * iMiB);
}

TEST_CASE("peaks: profiling never resets or reports the global peak") {
  SimDevice d;
  d.free(d.alloc(100 * MiB));
  gmp::GPUMemoryProfiler profiler(d.allocator);
  const auto r = profiler.profile_function("small", [&] { d.free(d.alloc(3 * MiB)); });
  CHECK(r.peak_memory_usage() == 3 * iMiB);
  CHECK(d.allocator.memory_stats().allocated_bytes.all().peak == 100 * iMiB);
  // And a reset of the global peak inside a scope does not disturb the scope's peak.
  auto scope = profiler.profile_context("with_reset");
  d.free(d.alloc(6 * MiB));
  d.allocator.reset_peak_memory_stats();
  CHECK(scope.stop().peak_memory_usage() == 6 * iMiB);
}

// Two threads step through a fixed interleaving (a barrier between steps); each step is done
// by one thread while the other waits. Allocated bytes are shared by both threads, so a
// scope's peak includes the other thread's allocations made inside its interval.
TEST_CASE("peaks: concurrent scopes on two threads, older scope closing first") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  std::barrier step(2);
  std::thread t1([&] {
    void* x = nullptr;
    {
      auto a = profiler.profile_context("A");
      x = d.alloc(20 * MiB);  // step 1: 20
      step.arrive_and_wait();
      d.free(x);  // step 2: 0, then T2 opens B and allocates 8
      step.arrive_and_wait();
      step.arrive_and_wait();
    }  // step 3: A closes: its interval saw 20 (and B's 8)
    step.arrive_and_wait();
  });
  std::thread t2([&] {
    step.arrive_and_wait();
    step.arrive_and_wait();
    auto b = profiler.profile_context("B");
    void* y = d.alloc(8 * MiB);  // step 2: 8
    step.arrive_and_wait();
    step.arrive_and_wait();      // A closes meanwhile
    void* z = d.alloc(4 * MiB);  // step 4: 12
    d.free(y);
    d.free(z);
  });
  t1.join();
  t2.join();
  CHECK(result_named(profiler, "A").peak_memory_usage() == 20 * iMiB);
  CHECK(result_named(profiler, "B").peak_memory_usage() == 12 * iMiB);
}

TEST_CASE("peaks: concurrent scopes on two threads, the newer one sees the higher peak first") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  std::barrier step(2);
  std::thread t1([&] {
    auto a = profiler.profile_context("A");  // step 1: A opens at 0
    step.arrive_and_wait();
    step.arrive_and_wait();      // step 2: T2 opens B, allocates 30, frees
    void* w = d.alloc(2 * MiB);  // step 3: 2
    step.arrive_and_wait();
    step.arrive_and_wait();  // step 4: B closes
    d.free(w);
  });  // A closes: 30 was inside its interval
  std::thread t2([&] {
    step.arrive_and_wait();
    {
      auto b = profiler.profile_context("B");
      d.free(d.alloc(30 * MiB));
      step.arrive_and_wait();
      step.arrive_and_wait();
    }
    step.arrive_and_wait();
    auto c = profiler.profile_context("C");  // after B; A still open
    void* v = d.alloc(1 * MiB);              // 3 MiB with T1's 2 MiB... or 1 once T1 freed
    d.free(v);
  });
  t1.join();
  t2.join();
  CHECK(result_named(profiler, "A").peak_memory_usage() == 30 * iMiB);
  CHECK(result_named(profiler, "B").peak_memory_usage() == 30 * iMiB);
  const auto c = result_named(profiler, "C").peak_memory_usage();
  // T1 frees its 2 MiB concurrently with C: before C opens (1), after C opens but before its
  // allocation (2: the level C opened at), or after that allocation (3).
  CHECK((c == 1 * iMiB || c == 2 * iMiB || c == 3 * iMiB));
}

TEST_CASE("peaks: many threads profiling the same allocator keep every peak consistent") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  constexpr int kThreads = 4;
  constexpr int kIterations = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        auto outer = profiler.profile_context("outer" + std::to_string(t));
        void* p = d.alloc(static_cast<std::size_t>(t + 1) * MiB);
        {
          auto inner = profiler.profile_context("inner");
          d.free(d.alloc(MiB));
        }
        d.free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto results = profiler.results();
  CHECK(results.size() == static_cast<std::size_t>(2 * kThreads * kIterations));
  for (const auto& r : results) {
    // A scope's peak covers at least its own live bytes and at most everything at once.
    CHECK(r.peak_memory_usage() >= std::max(r.memory_before.allocated_memory, r.memory_after.allocated_memory));
    CHECK(r.peak_memory_usage() <= static_cast<std::int64_t>((1 + 2 + 3 + 4 + kThreads) * MiB));
    CHECK(r.peak_memory_usage() >= (r.name == "inner" ? iMiB : 0));
  }
  d.allocator.validate();
  CHECK(d.allocator.gauges().allocated_bytes == 0);
}
