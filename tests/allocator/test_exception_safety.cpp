// Exception safety: std::bad_alloc injected at the 1st, 2nd, ... Nth heap allocation that an
// allocator operation makes (this binary replaces operator new to count them). After each, the
// exception has come out, validate() passes (every stat recounted from the blocks), the client's
// allocations are as before the call, and no byte is lost: everything can still be freed, and
// empty_cache() then gives every byte back to the device. The simulated device's own bookkeeping
// is not under test: its calls run with injection paused.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/mem_pool.hpp"
#include "gpumemprof/allocator/pointer_map.hpp"
#include "gpumemprof/device/simulated.hpp"

namespace gmp = gpumemprof;

// The replacements below pair malloc with free; g++ cannot see that through inlining.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace inject {
// Armed by the test thread only; other threads (none in these tests) never fail.
thread_local long target = 0;  // fail the target-th counted allocation; 0 = off
thread_local long seen = 0;
thread_local bool fired = false;
thread_local int paused = 0;

void count_one() {
  if (target == 0 || paused != 0) return;
  if (++seen == target) {
    fired = true;
    throw std::bad_alloc();
  }
}
void arm(long n) {
  target = n;
  seen = 0;
  fired = false;
}
bool disarm() {
  target = 0;
  return fired;
}
struct Pause {
  Pause() { ++paused; }
  ~Pause() { --paused; }
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;
};
void* allocate(std::size_t n, std::size_t align) {
  count_one();
  if (n == 0) n = 1;
  void* p =
      align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace inject

void* operator new(std::size_t n) { return inject::allocate(n, 0); }
void* operator new[](std::size_t n) { return inject::allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return inject::allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return inject::allocate(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return std::malloc(n == 0 ? 1 : n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return std::malloc(n == 0 ? 1 : n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

// The simulated device with injection paused in every call the allocator makes to it.
struct QuietSim : gmp::SimulatedBackend {
  using SimulatedBackend::SimulatedBackend;
  using Pause = inject::Pause;
  void* malloc(std::size_t n) {
    Pause p;
    return SimulatedBackend::malloc(n);
  }
  void free(void* ptr) {
    Pause p;
    SimulatedBackend::free(ptr);
  }
  gmp::Event record_event(gmp::Stream s) {
    Pause p;
    return SimulatedBackend::record_event(s);
  }
  bool query_event(gmp::Event e) {
    Pause p;
    return SimulatedBackend::query_event(e);
  }
  void synchronize_event(gmp::Event e) {
    Pause p;
    SimulatedBackend::synchronize_event(e);
  }
  void release_event(gmp::Event e) {
    Pause p;
    SimulatedBackend::release_event(e);
  }
  std::string name() const {
    Pause p;
    return SimulatedBackend::name();
  }
  gmp::Reservation reserve(std::size_t n, std::size_t page) {
    Pause p;
    return SimulatedBackend::reserve(n, page);
  }
  void release(gmp::Reservation r) {
    Pause p;
    SimulatedBackend::release(r);
  }
  bool map(gmp::Reservation r, std::size_t off, std::size_t n) {
    Pause p;
    return SimulatedBackend::map(r, off, n);
  }
  void unmap(gmp::Reservation r, std::size_t off, std::size_t n) {
    Pause p;
    SimulatedBackend::unmap(r, off, n);
  }
  void synchronize_stream(gmp::Stream s) {
    Pause p;
    SimulatedBackend::synchronize_stream(s);
  }
};
using Alloc = gmp::CachingAllocator<QuietSim>;

struct Fixture {
  Fixture(const char* conf, std::size_t capacity)
      : a(QuietSim(gmp::SimulatedOptions{capacity}), gmp::AllocatorConfig(conf)), capacity(capacity) {
    live.reserve(4096);  // the test's own bookkeeping allocates nothing while armed
  }
  void* alloc(std::size_t n, gmp::Stream s = {}) {
    void* p = a.allocate(n, s);
    live.push_back(p);
    return p;
  }
  void free_last() {
    a.deallocate(live.back());
    live.pop_back();
  }
  Alloc a;
  std::size_t capacity;
  std::vector<void*> live;
};

struct ClientView {  // what the client's allocations look like in the stats
  std::int64_t allocations, allocated;
  explicit ClientView(const gmp::MemoryStats& s)
      : allocations(s.allocation.all().current), allocated(s.allocated_bytes.all().current) {}
  bool operator==(const ClientView&) const = default;
};

// Runs op() on a fresh fixture (after setup()) with a failure at its 1st, 2nd, ... allocation,
// until op() completes without reaching the injected one. `strong` (op() is one allocator call):
// a failed op() leaves the client's allocations (count and bytes) as they were.
void fail_each_allocation(const char* conf, std::size_t capacity, const std::function<void(Fixture&)>& setup,
                          const std::function<void(Fixture&)>& op, bool strong = false) {
  long failures = 0;
  for (long n = 1;; ++n) {
    Fixture f(conf, capacity);
    setup(f);
    const ClientView before(f.a.memory_stats());
    bool threw = false;
    inject::arm(n);
    try {
      op(f);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool fired = inject::disarm();
    INFO("failure injected at allocation " << n << " of the operation");
    CHECK(threw == fired);  // propagated, never swallowed
    try {
      f.a.validate();
    } catch (const std::exception& e) {
      FAIL("validate(): " << e.what());
    }
    if (threw && strong) CHECK(ClientView(f.a.memory_stats()) == before);
    while (!f.live.empty()) f.free_last();
    f.a.empty_cache();
    REQUIRE_NOTHROW(f.a.validate());
    const auto st = f.a.memory_stats();
    CHECK(st.allocated_bytes.all().current == 0);
    CHECK(st.active_bytes.all().current == 0);
    CHECK(st.reserved_bytes.all().current == 0);
    CHECK(f.a.backend().mem_get_info().free == f.capacity);
    if (!fired) break;
    ++failures;
    REQUIRE(n < 5000);
  }
  CHECK(failures > 0);  // the operation allocates somewhere: the test reached it
}

void nothing(Fixture&) {}
}  // namespace

TEST_CASE("exception safety: the first allocation of a fresh allocator") {
  fail_each_allocation(
      "", 1024 * MiB, nothing, [](Fixture& f) { f.alloc(1000); }, true);
  fail_each_allocation(
      "", 1024 * MiB, nothing, [](Fixture& f) { f.alloc(30 * MiB); }, true);
}

TEST_CASE("exception safety: runs of allocations and frees on one stream") {
  fail_each_allocation("", 1024 * MiB, nothing, [](Fixture& f) {
    for (int i = 0; i < 700; ++i) f.alloc(512 * (1 + static_cast<std::size_t>(i % 7)));
    for (int i = 0; i < 40; ++i) f.alloc((1 + static_cast<std::size_t>(i % 5)) * 3 * MiB);
    while (!f.live.empty()) f.free_last();
  });
}

TEST_CASE("exception safety: a free that merges into a size never seen before") {
  // In one 20 MiB segment: [a 5][b 7][c 3][rest 5]. Freeing b after a gives a free block of 12 MiB.
  fail_each_allocation(
      "", 1024 * MiB,
      [](Fixture& f) {
        f.alloc(5 * MiB);
        f.alloc(7 * MiB);
        f.alloc(3 * MiB);
        void* a = f.live[0];
        f.a.deallocate(a);
        f.live.erase(f.live.begin());
      },
      [](Fixture& f) {
        f.a.deallocate(f.live[0]);
        f.live.erase(f.live.begin());
      },
      true);
}

TEST_CASE("exception safety: frees of blocks used on other streams, and their events") {
  const gmp::Stream s0(0), s1(1), s2(2);
  auto used_elsewhere = [=](Fixture& f) {
    for (int i = 0; i < 3; ++i) {
      void* p = f.alloc(1000 + 4096 * static_cast<std::size_t>(i), s0);
      f.a.record_stream(p, s1);
      f.a.record_stream(p, s2);
    }
  };
  fail_each_allocation(
      "", 1024 * MiB, used_elsewhere, [](Fixture& f) { f.free_last(); }, true);
  fail_each_allocation("", 1024 * MiB, used_elsewhere, [](Fixture& f) {
    while (!f.live.empty()) f.free_last();
  });
  // The events complete; the next allocations free the blocks.
  fail_each_allocation(
      "", 1024 * MiB,
      [=](Fixture& f) {
        used_elsewhere(f);
        while (!f.live.empty()) f.free_last();
        f.a.backend().complete_events(s1);
        f.a.backend().complete_events(s2);
      },
      [=](Fixture& f) {
        f.alloc(1000, s0);
        f.alloc(300 * KiB, s0);
        f.alloc(3 * MiB, s0);
      });
  fail_each_allocation("", 1024 * MiB, nothing, [=](Fixture& f) {
    void* p = f.alloc(1000, s0);
    f.a.record_stream(p, s1);
    f.a.record_stream(p, s2);
  });
}

TEST_CASE("exception safety: uses recorded and blocks freed while allocations go to a private pool") {
  const gmp::Stream s0(0), s1(1);
  fail_each_allocation("", 1024 * MiB, nothing, [=](Fixture& f) {
    // The pool's last release is called here, not in a destructor (which may not throw): a
    // failure in it reaches the test. One failure is injected: the release after one succeeds.
    const gmp::MempoolId id = gmp::graph_pool_handle();
    f.a.create_pool(id);
    try {
      {
        gmp::AllocateToPool route(f.a, id, s0);
        void* p = f.alloc(1000, s0);
        f.a.record_stream(p, s1);  // a use recorded while a route is active (c10: during capture)
        f.free_last();             // deferred until no route is active
        void* q = f.alloc(3 * MiB, s0);
        f.a.record_stream(q, s1);
      }
      f.alloc(1000, s0);  // resolves the deferred free: no event on s1
    } catch (...) {
      f.a.release_pool(id);
      throw;
    }
    f.a.release_pool(id);
  });
}

TEST_CASE("exception safety: empty_cache and the out-of-memory sequence") {
  const gmp::Stream s0(0), s1(1);
  auto cached = [=](Fixture& f) {
    for (int i = 0; i < 3; ++i) f.alloc(15 * MiB, s1);
    f.alloc(1000, s1);
    void* p = f.alloc(1000, s1);
    f.a.record_stream(p, s0);
    while (f.live.size() > 1) f.free_last();  // one small block stays allocated
  };
  fail_each_allocation(
      "", 128 * MiB, cached, [](Fixture& f) { f.a.empty_cache(); }, true);
  // 128 MiB device, 60 MiB of it cached on s1: 100 MiB on s0 needs the cache released.
  fail_each_allocation(
      "", 128 * MiB, cached, [=](Fixture& f) { f.alloc(100 * MiB, s0); }, true);
  fail_each_allocation(
      "max_split_size_mb:20", 128 * MiB, cached, [=](Fixture& f) { f.alloc(100 * MiB, s0); }, true);
}

TEST_CASE("exception safety: several streams (journaled stats) and the readers") {
  const gmp::Stream s1(1), s2(2);
  auto two_streams = [=](Fixture& f) {
    f.a.deallocate(f.a.allocate(1000, s1));
    f.a.deallocate(f.a.allocate(1000, s2));
  };
  fail_each_allocation("", 1024 * MiB, two_streams, [=](Fixture& f) {
    const std::uint64_t w = f.a.open_peak_window();
    for (int i = 0; i < 1200; ++i) {  // journals fill and fold
      f.alloc(512 * (1 + static_cast<std::size_t>(i % 5)), i % 3 == 0 ? s2 : s1);
      if (i % 2 == 1) f.free_last();
    }
    (void)f.a.gauges();
    (void)f.a.memory_stats();
    (void)f.a.close_peak_window(w);
    (void)f.a.segments();
  });
}

TEST_CASE("exception safety: expandable segments, PyTorch's and the compacting policy") {
  const gmp::Stream s0(0), s1(1);
  const char* conf = GENERATE("expandable_segments:True", "compacting_expandable_segments:True");
  INFO(conf);
  fail_each_allocation(
      conf, 256 * MiB,
      [=](Fixture& f) {
        f.alloc(30 * MiB, s1);
        f.free_last();  // s1's pages are free, for s0 to take once the device is full
      },
      [=](Fixture& f) {
        f.alloc(30 * MiB, s0);
        f.alloc(10 * MiB, s0);
        f.alloc(1000, s0);
        void* first = f.live[0];
        f.a.deallocate(first);
        f.live.erase(f.live.begin());
        f.alloc(180 * MiB, s0);
        f.alloc(20 * KiB, s0);
        f.a.empty_cache();
      },
      /*strong=*/false);
}

TEST_CASE("PointerMap: a rehash that fails leaves the map as it was") {
  gmp::detail::PointerMap<int> m;
  std::vector<int> values(200);
  std::size_t inserted = 0;
  for (int round = 0; round < 3; ++round) {
    inject::arm(1);
    try {
      for (; inserted < values.size(); ++inserted) m.insert((inserted + 1) * 512, &values[inserted]);
    } catch (const std::bad_alloc&) {
    }
    CHECK(inject::disarm());
    REQUIRE(m.size() == inserted);
    for (std::size_t i = 0; i < inserted; ++i) CHECK(m.find((i + 1) * 512) == &values[i]);
  }
  CHECK(inserted < values.size());
}
