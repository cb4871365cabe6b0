// Locks across the device's malloc and free: while one thread waits in the backend's malloc for a
// new segment (or in its free, in empty_cache and the OOM sequence), other streams' cached blocks
// are allocated and freed; with release_lock_on_cudamalloc (PyTorch's option) the same stream's
// too around malloc, and other slow paths run. Single-threaded, nothing changes. A test thread is
// held inside the backend at a gate; every wait has a timeout, so code that still holds the locks
// fails the test instead of hanging it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "catch.hpp"
#include "replay.hpp"
#include "sim_allocator.hpp"

namespace {

using namespace std::chrono_literals;

// A simulated device whose malloc and free call hooks first, outside the simulator's lock: a test
// holds a thread there, as a slow cudaMalloc or cudaFree would. Set hooks before threads start.
class HookedBackend {
 public:
  explicit HookedBackend(std::size_t capacity) : sim_(gmp::SimulatedOptions{capacity, 0, 2 * MiB, true}) {}
  std::function<void(std::size_t)> before_malloc;
  std::function<void()> before_free;

  [[nodiscard]] void* malloc(std::size_t bytes) {
    if (before_malloc) before_malloc(bytes);
    return sim_.malloc(bytes);
  }
  void free(void* p) {
    if (before_free) before_free();
    sim_.free(p);
  }
  [[nodiscard]] gmp::MemInfo mem_get_info() const { return sim_.mem_get_info(); }
  [[nodiscard]] gmp::Event record_event(gmp::Stream s) { return sim_.record_event(s); }
  [[nodiscard]] bool query_event(gmp::Event e) { return sim_.query_event(e); }
  void synchronize_event(gmp::Event e) { sim_.synchronize_event(e); }
  void release_event(gmp::Event e) { sim_.release_event(e); }
  [[nodiscard]] int index() const noexcept { return sim_.index(); }
  [[nodiscard]] std::string name() const { return sim_.name(); }
  [[nodiscard]] const gmp::SimulatedBackend& sim() const { return sim_; }

 private:
  gmp::SimulatedBackend sim_;
};
using HookedAllocator = gmp::CachingAllocator<HookedBackend>;

// One thread waits at the gate (inside malloc) until another opens it, or until a timeout.
class Gate {
 public:
  // Returns whether the gate was opened (false: timed out).
  bool wait_inside(std::chrono::milliseconds limit) {
    std::unique_lock lock(m_);
    ++inside_;
    cv_.notify_all();
    const bool opened = cv_.wait_for(lock, limit, [this] { return open_; });
    --inside_;
    return opened;
  }
  // Waits until `n` threads are inside (or a timeout); returns whether they are.
  bool wait_for_inside(int n, std::chrono::milliseconds limit = 5s) {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, limit, [&] { return inside_ >= n; });
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int inside_ = 0;
  bool open_ = false;
};

// Holds the first `held` mallocs at `gate` (for at most `limit`); records whether it was opened.
void hold_mallocs(HookedAllocator& a, Gate& gate, int held, std::atomic<bool>& opened,
                  std::chrono::milliseconds limit = 3s) {
  auto count = std::make_shared<std::atomic<int>>(0);
  a.backend().before_malloc = [&gate, &opened, count, held, limit](std::size_t) {
    if (count->fetch_add(1) < held) opened = gate.wait_inside(limit);
  };
}

// Holds the first device free at `gate` (for at most `limit`); records whether it was opened.
void hold_first_free(HookedAllocator& a, Gate& gate, std::atomic<bool>& opened, std::chrono::milliseconds limit = 3s) {
  auto count = std::make_shared<std::atomic<int>>(0);
  a.backend().before_free = [&gate, &opened, count, limit] {
    if (count->fetch_add(1) == 0) opened = gate.wait_inside(limit);
  };
}

// A thread that allocates a new 64 MiB segment on `stream` (into `big`), held in the device's
// malloc at `gate`; returns once it is there.
std::thread held_in_malloc(HookedAllocator& a, gmp::Stream stream, Gate& gate, std::atomic<bool>& opened, void*& big) {
  hold_mallocs(a, gate, 1, opened);
  std::thread slow([&a, stream, &big] { big = a.allocate(64 * MiB, stream); });
  REQUIRE(gate.wait_for_inside(1));
  return slow;
}

// A cached 1 MiB block on `stream`: allocated once and freed.
void warm(HookedAllocator& a, gmp::Stream stream) { a.deallocate(a.allocate(MiB, stream)); }

}  // namespace

TEST_CASE("while a thread waits in the device's malloc, other streams allocate and free their cached blocks",
          "[release_lock]") {
  for (const char* conf : {"", "release_lock_on_cudamalloc:True"}) {
    INFO("config: " << conf);
    HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig(conf));
    const gmp::Stream mine(1), other(2);
    warm(a, other);
    Gate gate;
    std::atomic<bool> opened{false};
    void* big = nullptr;
    std::thread slow = held_in_malloc(a, mine, gate, opened, big);
    std::thread fast([&] {
      void* p = a.allocate(100 * KiB, other);  // from the cached block: no device call
      a.deallocate(p);
      (void)a.memory_stats();  // the stats lock is free too
      (void)a.gauges();
      gate.open();
    });
    fast.join();
    slow.join();
    CHECK(opened);  // the other stream finished while the slow thread was still in malloc
    REQUIRE(big != nullptr);
    a.validate();
    const auto st = a.memory_stats();
    CHECK(st.allocation.all().current == 1);
    CHECK(st.num_device_alloc == 2);
    CHECK(st.allocated_bytes.all().allocated == static_cast<std::int64_t>(MiB + 100 * KiB + 64 * MiB));
    a.deallocate(big);
    a.validate();
  }
}

TEST_CASE("while the only stream's thread waits in the device's malloc, stats readers go on", "[release_lock]") {
  // One shard: its hot path writes the stats directly and readers hold it -- except while an
  // exclusive section keeps it across the malloc (it is "parked": nothing to wait for).
  HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig(""));
  const gmp::Stream mine(1);
  warm(a, mine);
  Gate gate;
  std::atomic<bool> opened{false};
  void* big = nullptr;
  std::thread slow = held_in_malloc(a, mine, gate, opened, big);
  std::thread reader([&] {
    const auto st = a.memory_stats();
    CHECK(st.allocation.all().current == 0);  // the allocation in flight is not counted yet
    CHECK(a.gauges().reserved_bytes == static_cast<std::int64_t>(2 * MiB));
    const std::uint64_t w = a.open_peak_window();
    CHECK(a.close_peak_window(w) == 0);
    gate.open();
  });
  reader.join();
  slow.join();
  CHECK(opened);  // the reader finished while the slow thread was still in malloc
  REQUIRE(big != nullptr);
  CHECK(a.memory_stats().allocation.all().current == 1);
  a.deallocate(big);
  a.validate();
}

TEST_CASE("the allocating stream waits for its malloc by default, and not with release_lock_on_cudamalloc",
          "[release_lock]") {
  const bool release = GENERATE(false, true);
  INFO("release_lock_on_cudamalloc: " << release);
  HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig(release ? "release_lock_on_cudamalloc:True"
                                                                         : "release_lock_on_cudamalloc:False"));
  CHECK(a.config().release_lock_on_cudamalloc == release);
  const gmp::Stream mine(1);
  warm(a, mine);
  Gate gate;
  std::atomic<bool> opened{false};
  hold_mallocs(a, gate, 1, opened);
  void* big = nullptr;
  std::thread slow([&] { big = a.allocate(64 * MiB, mine); });
  REQUIRE(gate.wait_for_inside(1));
  std::atomic<bool> done{false};
  std::thread same([&] {
    a.deallocate(a.allocate(100 * KiB, mine));
    done = true;
  });
  if (release) {
    for (int i = 0; i < 3000 && !done; ++i) std::this_thread::sleep_for(1ms);
    CHECK(done);  // PyTorch's semantics: the lock is released across cudaMalloc
  } else {
    std::this_thread::sleep_for(30ms);
    CHECK_FALSE(done);  // the stream's shard is held, as PyTorch holds its lock by default
  }
  gate.open();
  same.join();
  slow.join();
  CHECK(done);
  CHECK(opened);
  a.validate();
  a.deallocate(big);
  a.validate();
  CHECK(a.memory_stats().allocation.all().current == 0);
}

TEST_CASE("release_lock_on_cudamalloc: two mallocs at once, both counted against the memory fraction",
          "[release_lock]") {
  HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig("release_lock_on_cudamalloc:True"));
  a.set_memory_fraction(100.0 * MiB / (8.0 * GiB));  // room for one 64 MiB segment, not two
  Gate gate;
  std::atomic<bool> opened{false};
  hold_mallocs(a, gate, 1, opened);
  void* first = nullptr;
  std::thread slow([&] { first = a.allocate(64 * MiB, gmp::Stream(1)); });
  REQUIRE(gate.wait_for_inside(1));
  // Meanwhile: another stream's new segment (a second malloc in flight), a refused one, and
  // empty_cache -- each a slow path that would wait for the device mutex without the option.
  void* small = a.allocate(MiB, gmp::Stream(2));
  CHECK_THROWS_AS(a.allocate(64 * MiB, gmp::Stream(1)), gmp::OutOfMemoryError);
  a.empty_cache();
  a.validate();
  gate.open();
  slow.join();
  CHECK(opened);
  REQUIRE(first != nullptr);
  a.validate();
  const auto st = a.memory_stats();
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(64 * MiB + 2 * MiB));
  CHECK(st.num_ooms == 1);
  CHECK(st.num_alloc_retries == 1);
  a.deallocate(first);
  a.deallocate(small);
  a.validate();
}

TEST_CASE("while empty_cache or the OOM sequence waits in the device's free, other streams go on", "[release_lock]") {
  const bool oom = GENERATE(false, true);
  INFO((oom ? "the OOM sequence" : "empty_cache"));
  HookedAllocator a(HookedBackend(100 * MiB), gmp::AllocatorConfig(""));
  void* kept = a.allocate(100 * KiB, gmp::Stream(2));  // its 2 MiB segment stays: split, in use
  a.deallocate(a.allocate(64 * MiB, gmp::Stream(1)));  // a whole cached segment to give back
  Gate gate;
  std::atomic<bool> opened{false};
  hold_first_free(a, gate, opened);
  void* big = nullptr;
  // 2 + 64 + 80 MiB do not fit in 100: the OOM sequence frees the cached 64 MiB and retries.
  std::thread slow([&] { oom ? (void)(big = a.allocate(80 * MiB, gmp::Stream(1))) : a.empty_cache(); });
  REQUIRE(gate.wait_for_inside(1));
  std::thread fast([&] {
    a.deallocate(a.allocate(200 * KiB, gmp::Stream(2)));  // from the split segment's free rest
    (void)a.memory_stats();
    gate.open();
  });
  fast.join();
  slow.join();
  CHECK(opened);
  a.validate();
  const auto st = a.memory_stats();
  CHECK(st.num_device_free == 1);
  CHECK(st.num_alloc_retries == (oom ? 1 : 0));
  CHECK(st.num_ooms == 0);
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(2 * MiB + (oom ? 80 * MiB : 0)));
  if (big != nullptr) a.deallocate(big);
  a.deallocate(kept);
  a.validate();
}

TEST_CASE("a throwing device free leaves the segments it did not free cached and the allocator valid",
          "[release_lock]") {
  HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig(""));
  a.deallocate(a.allocate(64 * MiB, gmp::Stream(1)));
  a.deallocate(a.allocate(64 * MiB, gmp::Stream(2)));
  a.backend().before_free = [] { throw gmp::DeviceRuntimeError("sim:0: injected failure"); };
  CHECK_THROWS_AS(a.empty_cache(), gmp::DeviceRuntimeError);
  a.validate();
  CHECK(a.memory_stats().reserved_bytes.all().current == static_cast<std::int64_t>(128 * MiB));
  a.backend().before_free = nullptr;
  void* p = a.allocate(64 * MiB, gmp::Stream(2));  // the cached segment, still in its tree
  CHECK(a.memory_stats().num_device_alloc == 2);
  a.deallocate(p);
  a.empty_cache();
  a.validate();
  CHECK(a.memory_stats().reserved_bytes.all().current == 0);
}

TEST_CASE("a throwing device malloc leaves every lock taken back and the allocator unchanged", "[release_lock]") {
  for (const char* conf : {"", "release_lock_on_cudamalloc:True"}) {
    INFO("config: " << conf);
    HookedAllocator a(HookedBackend(8 * GiB), gmp::AllocatorConfig(conf));
    warm(a, gmp::Stream(2));
    a.backend().before_malloc = [](std::size_t) { throw gmp::DeviceRuntimeError("sim:0: injected failure"); };
    CHECK_THROWS_AS(a.allocate(64 * MiB, gmp::Stream(1)), gmp::DeviceRuntimeError);
    a.validate();
    a.backend().before_malloc = nullptr;
    void* p = a.allocate(64 * MiB, gmp::Stream(1));
    a.deallocate(a.allocate(100 * KiB, gmp::Stream(2)));
    a.deallocate(p);
    a.validate();
    CHECK(a.memory_stats().num_device_alloc == 2);
  }
}

TEST_CASE("release_lock_on_cudamalloc changes nothing single-threaded: the OOM sequence and a real trace",
          "[release_lock]") {
  auto run = [](const char* conf) {
    SimAlloc s(conf, 200 * MiB);
    std::vector<void*> live;
    std::size_t ooms = 0;
    for (int i = 0; i < 400; ++i) {  // sizes that need new segments, cached-block releases and retries
      const std::size_t bytes = (std::size_t{1} << (10 + i % 17)) + static_cast<std::size_t>(i) * 4099;
      try {
        live.push_back(s.a.allocate(bytes, gmp::Stream(static_cast<std::uintptr_t>(i % 2))));
      } catch (const gmp::OutOfMemoryError&) {
        ++ooms;
      }
      if (i % 3 == 2) {
        s.a.deallocate(live[live.size() / 2]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(live.size() / 2));
      }
      s.a.validate();
    }
    for (void* p : live) s.a.deallocate(p);
    s.a.validate();
    return std::tuple(s.stats(), s.sim().counters(), ooms);
  };
  const auto [st0, c0, ooms0] = run("max_split_size_mb:40");
  const auto [st1, c1, ooms1] = run("max_split_size_mb:40,release_lock_on_cudamalloc:True");
  CHECK(ooms0 > 0);
  CHECK(st0.num_alloc_retries > 0);
  CHECK(ooms1 == ooms0);
  CHECK(st1.num_alloc_retries == st0.num_alloc_retries);
  CHECK(st1.num_ooms == st0.num_ooms);
  CHECK(st1.num_device_alloc == st0.num_device_alloc);
  CHECK(st1.num_device_free == st0.num_device_free);
  CHECK(st1.reserved_bytes.all().peak == st0.reserved_bytes.all().peak);
  CHECK(c1.malloc_calls == c0.malloc_calls);
  CHECK(c1.free_calls == c0.free_calls);

  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  const auto t = gmp::tools::load_trace(std::string(src != nullptr ? src : ".") + "/tests/data/gpt2_generate.trace.gz");
  SimAlloc a(""), b("release_lock_on_cudamalloc:True");
  const auto ra = gmp::tools::replay(t, a.a);
  const auto rb = gmp::tools::replay(t, b.a);
  CHECK(rb.peak_reserved_bytes == ra.peak_reserved_bytes);
  CHECK(rb.stats.num_device_alloc == ra.stats.num_device_alloc);
  b.a.validate();
}

// Not a test: how long another thread's allocate+free pair takes when it starts while one thread
// is inside a 5 ms device malloc for a new segment -- on another stream, and on the same one.
// Run: test_allocator "[.measure]" -s
TEST_CASE("measure: a pair started while another thread waits in the device's malloc", "[.measure]") {
  const auto delay = std::chrono::milliseconds(5);
  for (const char* conf : {"", "release_lock_on_cudamalloc:True"}) {
    gmp::AllocatorConfig cfg;
    try {  // so that the same source measures the code before the option existed
      cfg = gmp::AllocatorConfig(conf);
    } catch (const gmp::ConfigError&) {
      std::printf("config '%s' is not accepted by this build\n", conf);
      continue;
    }
    for (const std::uintptr_t pair_stream : {2, 1}) {
      HookedAllocator a(HookedBackend(80 * GiB), cfg);
      warm(a, gmp::Stream(1));
      warm(a, gmp::Stream(2));
      std::atomic<bool> inside{false};
      a.backend().before_malloc = [&inside, delay](std::size_t) {
        inside = true;
        std::this_thread::sleep_for(delay);
      };
      std::vector<double> us;
      std::vector<void*> held;
      for (int rep = 0; rep < 21; ++rep) {
        inside = false;
        std::thread creator([&] { held.push_back(a.allocate(12 * MiB, gmp::Stream(1))); });  // a new segment
        while (!inside) std::this_thread::yield();
        const auto t0 = std::chrono::steady_clock::now();
        a.deallocate(a.allocate(100 * KiB, gmp::Stream(pair_stream)));
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        creator.join();
      }
      for (void* p : held) a.deallocate(p);
      a.validate();
      std::sort(us.begin(), us.end());
      std::printf("config '%s', pair on the %s stream: median %.1f us, min %.1f, max %.1f (21 pairs, malloc %lld ms)\n",
                  conf, pair_stream == 1 ? "same" : "other", us[us.size() / 2], us.front(), us.back(),
                  static_cast<long long>(delay.count()));
    }
  }
  // The same while empty_cache waits in a 5 ms device free.
  HookedAllocator a(HookedBackend(80 * GiB), gmp::AllocatorConfig(""));
  void* kept = a.allocate(100 * KiB, gmp::Stream(2));  // its segment stays (split, in use)
  std::atomic<bool> inside{false};
  a.backend().before_free = [&inside, delay] {
    inside = true;
    std::this_thread::sleep_for(delay);
  };
  std::vector<double> us;
  for (int rep = 0; rep < 21; ++rep) {
    a.deallocate(a.allocate(64 * MiB, gmp::Stream(1)));  // a whole cached segment for empty_cache
    inside = false;
    std::thread releaser([&] { a.empty_cache(); });
    while (!inside) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    a.deallocate(a.allocate(200 * KiB, gmp::Stream(2)));
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    releaser.join();
  }
  a.deallocate(kept);
  a.validate();
  std::sort(us.begin(), us.end());
  std::printf("empty_cache, pair on another stream: median %.1f us, min %.1f, max %.1f (21 pairs, free %lld ms)\n",
              us[us.size() / 2], us.front(), us.back(), static_cast<long long>(delay.count()));
}
