// The monitor: the bounded sample buffer, the periodic sampler thread, and the profiler's
// start_monitoring / stop_monitoring / snapshots; plus the process RSS reading.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/profiler/process_memory.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/ring_buffer.hpp"
#include "gpumemprof/profiler/sampler.hpp"
#include "profiler_test_util.hpp"

TEST_CASE("ring buffer: keeps the newest elements in order and counts the dropped") {
  gmp::detail::RingBuffer<int> ring(3);
  CHECK(ring.empty());
  ring.push(1);
  ring.push(2);
  CHECK(ring.to_vector() == std::vector<int>{1, 2});
  for (int i = 3; i <= 7; ++i) ring.push(i);
  CHECK(ring.to_vector() == std::vector<int>{5, 6, 7});
  CHECK(ring.size() == 3);
  CHECK(ring.dropped() == 4);
  std::vector<int> seen;
  ring.for_each([&](int v) { seen.push_back(v); });
  CHECK(seen == std::vector<int>{5, 6, 7});
  ring.clear();
  CHECK(ring.empty());
  CHECK(ring.dropped() == 0);
  ring.push(9);
  CHECK(ring.to_vector() == std::vector<int>{9});
  CHECK_THROWS_AS(gmp::detail::RingBuffer<int>(0), std::invalid_argument);
}

TEST_CASE("sampler: runs its task repeatedly until stopped, and reports task errors") {
  gmp::PeriodicSampler sampler;
  std::mutex m;
  std::condition_variable cv;
  int runs = 0;
  sampler.start(std::chrono::microseconds(500), [&] {
    std::lock_guard lock(m);
    if (++runs == 3) throw std::runtime_error("third run failed");
    cv.notify_all();
  });
  CHECK(sampler.running());
  CHECK_THROWS_AS(sampler.start(std::chrono::milliseconds(1), [] {}), std::logic_error);
  {
    std::unique_lock lock(m);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return runs >= 5; }));
  }
  sampler.stop();
  CHECK_FALSE(sampler.running());
  CHECK(sampler.ticks() >= 5);
  CHECK(sampler.last_error() == "third run failed");
  const auto ticks = sampler.ticks();
  sampler.stop();  // idempotent
  CHECK(sampler.ticks() == ticks);
  CHECK_THROWS_AS(sampler.start(std::chrono::nanoseconds(0), [] {}), std::invalid_argument);
  // Restartable.
  sampler.start(std::chrono::milliseconds(1), [] {});
  REQUIRE(eventually([&] { return sampler.ticks() > ticks; }));
}

TEST_CASE("sampler: stop() wakes a long interval at once") {
  gmp::PeriodicSampler sampler;
  sampler.start(std::chrono::hours(1), [] {});
  REQUIRE(eventually([&] { return sampler.ticks() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  sampler.stop();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("monitoring: samples gauges, device memory and RSS into a bounded buffer") {
  SimDevice d;
  void* p = d.alloc(24 * MiB);
  gmp::GPUMemoryProfiler profiler(d.allocator, {.track_cpu_memory = true, .max_snapshots = 4});
  CHECK_FALSE(profiler.is_monitoring());
  profiler.start_monitoring(std::chrono::milliseconds(1));
  profiler.start_monitoring(std::chrono::milliseconds(1));  // no-op while on
  CHECK(profiler.is_monitoring());
  REQUIRE(eventually([&] { return profiler.get_summary().snapshots_collected == 4; }));
  // Wait until the oldest sample has been overwritten: the buffer stays bounded.
  const double first = profiler.snapshots().front().timestamp;
  REQUIRE(eventually([&] { return profiler.snapshots().front().timestamp > first; }));
  CHECK(profiler.get_summary().monitoring_active);
  profiler.stop_monitoring();
  CHECK_FALSE(profiler.is_monitoring());
  CHECK(profiler.monitoring_error().empty());

  const auto samples = profiler.snapshots();
  REQUIRE(samples.size() == 4);  // bounded: the monitor ran longer than 4 ticks
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    CHECK(s.operation == "monitoring");
    CHECK(s.allocated_memory == 24 * iMiB);
    CHECK(s.reserved_memory >= 24 * iMiB);
    CHECK(s.cpu_memory > 0);
    REQUIRE(s.device_used_memory.has_value());
    CHECK(*s.device_used_memory == static_cast<std::int64_t>(d.sim().used_bytes()));
    CHECK(s.device_total_memory == static_cast<std::int64_t>(GiB));
    if (i > 0) CHECK(s.timestamp >= samples[i - 1].timestamp);
  }
  profiler.clear_results();
  CHECK(profiler.snapshots().empty());
  d.free(p);
}

TEST_CASE("monitoring: the sampler never takes the allocator's lock") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  profiler.start_monitoring(std::chrono::milliseconds(1));
  // With the allocator locked, samples keep coming: the gauges are read lock-free.
  d.allocator.with_lock([&](const auto&) {
    const auto before = profiler.snapshots().size();
    CHECK(eventually([&] { return profiler.snapshots().size() >= before + 3; }));
  });
  profiler.stop_monitoring();
}

TEST_CASE("monitoring: a profiler destroyed while monitoring stops and joins its thread") {
  SimDevice d;
  {
    gmp::GPUMemoryProfiler profiler(d.allocator);
    profiler.start_monitoring(std::chrono::microseconds(100));
    REQUIRE(eventually([&] { return !profiler.snapshots().empty(); }));
  }
  SUCCEED("destroyed without hanging");
}

TEST_CASE("monitoring: sample_now records one sample without the thread") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  void* p = d.alloc(3 * MiB);
  profiler.sample_now();
  REQUIRE(profiler.snapshots().size() == 1);
  CHECK(profiler.snapshots()[0].allocated_memory == 3 * iMiB);
  d.free(p);
}

namespace {
/// Touches `bytes` of fresh anonymous pages (not recycled heap memory): RSS must grow by them.
std::int64_t rss_growth_when_touching(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  const std::int64_t before = gmp::process_rss_bytes();
  std::memset(p, 1, bytes);
  const std::int64_t after = gmp::process_rss_bytes();
  ::munmap(p, bytes);
  return after - before;
}
}  // namespace

TEST_CASE("process RSS grows with touched memory, and a forked child reads its own") {
  REQUIRE(gmp::process_rss_bytes() > 0);
  CHECK(rss_growth_when_touching(64 * MiB) >= static_cast<std::int64_t>(60 * MiB));

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // With the parent's descriptor, the reading would not see the child's own pages.
    ::_exit(rss_growth_when_touching(64 * MiB) >= static_cast<std::int64_t>(60 * MiB) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
