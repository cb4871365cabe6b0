// The OOM sequence, the error paths, and that the allocator stays valid and usable after each.
#include <new>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

using Catch::Matchers::Contains;

TEST_CASE("a cached block that is too small is released and the final retry succeeds") {
  SimAlloc s("", 100 * MiB);
  void* a = s.a.allocate(60 * MiB);
  s.a.deallocate(a);                 // 60 MiB cached
  void* b = s.a.allocate(80 * MiB);  // device has 40 MiB free: release the cache, retry once
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.num_alloc_retries == 1);
  CHECK(st.num_sync_all_streams == 1);
  CHECK(st.num_device_free == 1);
  CHECK(st.num_ooms == 0);
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(80 * MiB));
  s.a.deallocate(b);
  s.a.validate();
}

TEST_CASE("with max_split_size, releasing one oversize block suffices: no retry is counted") {
  SimAlloc s("max_split_size_mb:40", 100 * MiB);
  void* a = s.a.allocate(70 * MiB);
  s.a.deallocate(a);
  void* b = s.a.allocate(50 * MiB);  // 70 >= 50 + 20: not taken; device has 30 MiB free
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.num_alloc_retries == 0);
  CHECK(st.num_sync_all_streams == 0);
  CHECK(st.num_device_free == 1);
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(50 * MiB));
  s.a.deallocate(b);
}

TEST_CASE("with max_split_size, several oversize blocks are released largest first") {
  SimAlloc s("max_split_size_mb:20", 100 * MiB);
  void* a = s.a.allocate(30 * MiB);
  void* b = s.a.allocate(24 * MiB);
  void* c = s.a.allocate(22 * MiB);
  for (void* p : {a, b, c}) s.a.deallocate(p);
  // 76 MiB cached in three oversize blocks, 24 MiB free on the device. A 70 MiB request fits
  // none; freeing the largest (30) then 24 reaches 54 < 70, then 22: 76 >= 70.
  void* d = s.a.allocate(70 * MiB);
  s.a.validate();
  CHECK(s.stats().num_device_free == 3);
  CHECK(s.stats().num_alloc_retries == 0);
  s.a.deallocate(d);
}

TEST_CASE("real OOM: message, counters, trace of the sequence, and normal use afterwards") {
  SimAlloc s("", 100 * MiB);
  void* live = s.a.allocate(60 * MiB);
  bool threw = false;
  try {
    (void)s.a.allocate(50 * MiB);
  } catch (const gmp::OutOfMemoryError& e) {
    threw = true;
    const std::string m = e.what();
    CHECK_THAT(m, Contains("out of memory"));
    CHECK_THAT(m, Contains("Tried to allocate 50.00 MiB"));
    CHECK_THAT(m, Contains("total capacity of 100.00 MiB"));
    CHECK_THAT(m, Contains("of which 40.00 MiB is free"));
    CHECK_THAT(m, Contains("60.00 MiB is allocated by gpumemprof"));
    CHECK_THAT(m, Contains("0 bytes is reserved by gpumemprof but unallocated"));
    CHECK_THAT(m, Contains("expandable_segments:True"));
    CHECK(e.requested_bytes() == 50 * MiB);
  }
  CHECK(threw);
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.num_ooms == 1);
  CHECK(st.num_alloc_retries == 1);
  CHECK(st.allocation.all().current == 1);
  // Still usable.
  void* p = s.a.allocate(30 * MiB);
  s.a.validate();
  s.a.deallocate(p);
  s.a.deallocate(live);
  s.a.validate();
}

TEST_CASE("OutOfMemoryError is a std::bad_alloc") {
  SimAlloc s("", 10 * MiB);
  CHECK_THROWS_AS(s.a.allocate(20 * MiB), std::bad_alloc);
  s.a.validate();
}

TEST_CASE("fragmentation OOM explains itself") {
  SimAlloc s("", 100 * MiB);
  std::vector<void*> live;
  for (int i = 0; i < 10; ++i) live.push_back(s.a.allocate(7 * MiB));  // 2 per 20 MiB segment
  s.a.validate();
  CHECK(s.stats().segment.all().current == 5);
  try {
    (void)s.a.allocate(8 * MiB);
    FAIL("expected an OOM");
  } catch (const gmp::OutOfMemoryError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("30.00 MiB is reserved by gpumemprof but unallocated"));
    CHECK_THAT(m, Contains("Fragmentation is the cause"));
    CHECK_THAT(m, Contains("largest free cached block (6.00 MiB)"));
  }
  s.a.validate();
  for (void* p : live) s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("OOM observers run before the throw, outside the lock") {
  SimAlloc s("", 50 * MiB);
  gmp::OomInfo seen;
  int calls = 0;
  s.a.attach_oom_observer([&](const gmp::OomInfo& info) {
    seen = info;
    ++calls;
    s.a.validate();  // takes the lock: proves the observer runs outside it
  });
  void* a = s.a.allocate(30 * MiB);
  CHECK_THROWS_AS(s.a.allocate(40 * MiB), gmp::OutOfMemoryError);
  CHECK(calls == 1);
  CHECK(seen.requested_bytes == 40 * MiB);
  CHECK(seen.allocation_bytes == 40 * MiB);
  CHECK(seen.device_total == 50 * MiB);
  CHECK(seen.allocated_bytes == 30 * MiB);
  s.a.deallocate(a);
}

TEST_CASE("memory fraction caps reserved memory") {
  SimAlloc s("", 100 * MiB);
  s.a.set_memory_fraction(0.5);
  void* a = s.a.allocate(40 * MiB);
  CHECK_THROWS_AS(s.a.allocate(20 * MiB), gmp::OutOfMemoryError);
  s.a.validate();
  s.a.deallocate(a);
  void* b = s.a.allocate(50 * MiB);  // exactly the cap, after the cache is released
  s.a.deallocate(b);
  s.a.validate();
  CHECK_THROWS_AS(s.a.set_memory_fraction(1.5), std::invalid_argument);
}

TEST_CASE("garbage collection releases the oldest free segments without synchronizing") {
  SimAlloc s("garbage_collection_threshold:0.5", 100 * MiB);
  s.a.set_memory_fraction(1.0);
  void* a = s.a.allocate(30 * MiB);  // lookup 1
  s.a.deallocate(a);                 // free since lookup 1
  void* b = s.a.allocate(36 * MiB);  // lookup 2 (A too small): new segment
  s.a.deallocate(b);                 // free since lookup 2
  // Reserved 66 MiB > 50 MiB. The next miss collects: ages A=2, B=1, mean 1.5 -> only A goes.
  void* c = s.a.allocate(40 * MiB);  // lookup 3
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.num_device_free == 1);
  CHECK(st.num_sync_all_streams == 0);
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(76 * MiB));
  s.a.deallocate(c);
}

TEST_CASE("foreign, interior and double frees throw and change nothing") {
  SimAlloc s;
  void* p = s.a.allocate(4096);
  const auto before = s.stats();
  int host_object = 0;
  CHECK_THROWS_AS(s.a.deallocate(&host_object), gmp::InvalidPointerError);
  CHECK_THROWS_WITH(s.a.deallocate(&host_object), Contains("foreign pointer"));
  CHECK_THROWS_WITH(s.a.deallocate(static_cast<char*>(p) + 512), Contains("inside an allocation of 4096 bytes"));
  CHECK(s.stats() == before);
  s.a.validate();
  s.a.deallocate(p);
  const auto after = s.stats();
  CHECK_THROWS_WITH(s.a.deallocate(p), Contains("double free"));
  CHECK(s.stats() == after);
  s.a.validate();
  CHECK_THROWS_AS(s.a.record_stream(p, gmp::Stream(3)), gmp::InvalidPointerError);
  // still usable
  void* q = s.a.allocate(4096);
  CHECK(q == p);
  s.a.deallocate(q);
  s.a.validate();
}
