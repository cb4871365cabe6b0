// Any number of threads allocate and free at once; the allocator stays consistent.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
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
