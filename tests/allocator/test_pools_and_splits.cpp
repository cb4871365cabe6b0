// Pools, segments, best fit, split and merge, with the exact stats PyTorch would report.
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

using gmp::StatPool;

TEST_CASE("600 B -> a 1024 B block in a 2 MiB small segment") {
  SimAlloc s;
  void* p = s.a.allocate(600);
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.reserved_bytes[StatPool::small_pool].current == 2 * MiB);
  CHECK(st.reserved_bytes[StatPool::large_pool].current == 0);
  CHECK(st.segment[StatPool::small_pool].current == 1);
  CHECK(st.allocated_bytes[StatPool::small_pool].current == 1024);
  CHECK(st.requested_bytes[StatPool::small_pool].current == 600);
  CHECK(st.allocation.all().current == 1);
  CHECK(st.inactive_split[StatPool::small_pool].current == 1);
  CHECK(st.inactive_split_bytes[StatPool::small_pool].current == 2 * MiB - 1024);
  CHECK(st.num_device_alloc == 1);
  s.a.deallocate(p);
  s.a.validate();
  const auto after = s.stats();
  CHECK(after.allocated_bytes.all().current == 0);
  CHECK(after.inactive_split.all().current == 0);        // merged back into one whole block
  CHECK(after.reserved_bytes.all().current == 2 * MiB);  // cached, not returned
  CHECK(after.active.all().current == 0);
}

TEST_CASE("1 MiB + 1 B -> a 20 MiB large segment, remainder split off") {
  SimAlloc s;
  void* p = s.a.allocate(MiB + 1);
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.reserved_bytes[StatPool::large_pool].current == 20 * MiB);
  CHECK(st.allocated_bytes[StatPool::large_pool].current == MiB + 512);
  CHECK(st.inactive_split_bytes[StatPool::large_pool].current == 19 * MiB - 512);
  CHECK(st.inactive_split[StatPool::large_pool].current == 1);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("1 MiB exactly is small-pool") {
  SimAlloc s;
  void* p = s.a.allocate(MiB);
  CHECK(s.stats().reserved_bytes[StatPool::small_pool].current == 2 * MiB);
  CHECK(s.stats().inactive_split_bytes[StatPool::small_pool].current == MiB);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("11 MiB -> a 12 MiB segment used whole; the 1 MiB remainder stays allocated") {
  SimAlloc s;
  void* p = s.a.allocate(11 * MiB);
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.reserved_bytes.all().current == 12 * MiB);
  CHECK(st.allocated_bytes.all().current == 12 * MiB);
  CHECK(st.requested_bytes.all().current == 11 * MiB);
  CHECK(st.inactive_split.all().current == 0);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("10 MiB + 512 B -> 12 MiB segment, remainder above 1 MiB is split") {
  SimAlloc s;
  void* p = s.a.allocate(10 * MiB + 1);
  const auto st = s.stats();
  CHECK(st.reserved_bytes.all().current == 12 * MiB);
  CHECK(st.allocated_bytes.all().current == 10 * MiB + 512);
  CHECK(st.inactive_split_bytes.all().current == 2 * MiB - 512);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("9 MiB -> 20 MiB segment; next 9 MiB reuses its remainder") {
  SimAlloc s;
  void* a = s.a.allocate(9 * MiB);
  void* b = s.a.allocate(9 * MiB);
  s.a.validate();
  CHECK(addr(b) == addr(a) + 9 * MiB);
  const auto st = s.stats();
  CHECK(st.segment.all().current == 1);
  CHECK(st.inactive_split_bytes.all().current == 2 * MiB);
  CHECK(st.inactive_split.all().current == 1);
  // A third 9 MiB does not fit the 2 MiB remainder: a new segment.
  void* c = s.a.allocate(9 * MiB);
  CHECK(s.stats().segment.all().current == 2);
  for (void* p : {a, b, c}) {
    s.a.deallocate(p);
    s.a.validate();
  }
}

TEST_CASE("split remainders and inactive_split through frees in any order") {
  SimAlloc s;
  void* a = s.a.allocate(1024);
  void* b = s.a.allocate(1024);
  void* c = s.a.allocate(1024);
  s.a.validate();
  CHECK(addr(b) == addr(a) + 1024);
  CHECK(addr(c) == addr(b) + 1024);
  CHECK(s.stats().inactive_split.all().current == 1);  // the tail of the segment
  CHECK(s.stats().inactive_split_bytes.all().current == 2 * MiB - 3 * 1024);

  s.a.deallocate(b);  // a hole between a and c
  s.a.validate();
  CHECK(s.stats().inactive_split.all().current == 2);
  CHECK(s.stats().inactive_split_bytes.all().current == 2 * MiB - 2 * 1024);

  s.a.deallocate(a);  // merges with b
  s.a.validate();
  CHECK(s.stats().inactive_split.all().current == 2);
  CHECK(s.stats().inactive_split_bytes.all().current == 2 * MiB - 1024);

  s.a.deallocate(c);  // merges both sides: the segment is one free block again
  s.a.validate();
  CHECK(s.stats().inactive_split.all().current == 0);
  CHECK(s.stats().inactive_split_bytes.all().current == 0);
  const auto st = s.stats();
  // PyTorch applies the net change per free: a merging b is -1 +1 = no change at all.
  CHECK(st.inactive_split.all().allocated == 2);
  CHECK(st.inactive_split.all().freed == 2);
}

TEST_CASE("reusing an already-split block without splitting it") {
  SimAlloc s;
  void* a = s.a.allocate(1024);
  void* b = s.a.allocate(1024);
  void* c = s.a.allocate(1024);
  s.a.deallocate(b);
  const auto before = s.stats().inactive_split_bytes.all().current;
  void* b2 = s.a.allocate(1000);  // rounds to 1024: takes the hole exactly
  s.a.validate();
  CHECK(b2 == b);
  CHECK(s.stats().inactive_split_bytes.all().current == before - 1024);
  CHECK(s.stats().inactive_split.all().current == 1);
  for (void* p : {a, b2, c}) s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("best fit: smallest block that fits, lowest address among equals") {
  SimAlloc s;
  // Holes of 4 KiB, 2 KiB, 2 KiB and 3 KiB inside one small segment, separated by live blocks.
  std::vector<void*> keep;
  auto hole = [&](std::size_t n) {
    void* h = s.a.allocate(n);
    keep.push_back(s.a.allocate(512));
    return h;
  };
  void* h4 = hole(4096);
  void* h2a = hole(2048);
  void* h2b = hole(2048);
  void* h3 = hole(3072);
  for (void* h : {h4, h2a, h2b, h3}) s.a.deallocate(h);
  s.a.validate();
  CHECK(s.a.allocate(2000) == h2a);  // 2 KiB, lower address of the two
  CHECK(s.a.allocate(2048) == h2b);
  CHECK(s.a.allocate(2049) == h3);  // 2.5 KiB: the 3 KiB hole beats the 4 KiB one
  void* p = s.a.allocate(3500);
  CHECK(p == h4);
  s.a.validate();
}

TEST_CASE("free blocks are reused only on their own stream") {
  SimAlloc s;
  const gmp::Stream s1(1), s2(2);
  void* a = s.a.allocate(4096, s1);
  s.a.deallocate(a);
  void* b = s.a.allocate(4096, s2);  // s1's cached segment is not eligible
  CHECK(s.stats().segment.all().current == 2);
  CHECK(b != a);
  void* c = s.a.allocate(4096, s1);  // same stream: immediate reuse
  CHECK(c == a);
  s.a.deallocate(b);
  s.a.deallocate(c);
  s.a.validate();
}

TEST_CASE("max_split_size: oversize rules") {
  SimAlloc s("max_split_size_mb:40");
  CHECK(s.stats().max_split_size == 40 * static_cast<std::int64_t>(MiB));
  void* big = s.a.allocate(70 * MiB);
  CHECK(s.stats().oversize_segments.current == 1);
  CHECK(s.stats().oversize_allocations.current == 1);
  s.a.deallocate(big);
  CHECK(s.stats().oversize_allocations.current == 0);
  CHECK(s.stats().oversize_segments.current == 1);
  s.a.validate();

  // A request below max_split_size never takes an oversize block.
  void* small = s.a.allocate(30 * MiB);
  CHECK(s.stats().segment.all().current == 2);
  CHECK(addr(small) != addr(big));
  // A large request takes an oversize block only if it wastes less than 20 MiB...
  void* l1 = s.a.allocate(45 * MiB);  // 70 >= 45 + 20: refused, new 46 MiB segment
  CHECK(s.stats().segment.all().current == 3);
  CHECK(addr(l1) != addr(big));
  void* l2 = s.a.allocate(55 * MiB);  // 70 < 55 + 20: takes the whole 70 MiB block, unsplit
  CHECK(l2 == big);
  CHECK(s.stats().allocated_bytes.all().current == static_cast<std::int64_t>((30 + 46 + 70) * MiB));
  CHECK(s.stats().oversize_allocations.current == 2);
  s.a.validate();
  for (void* p : {small, l1, l2}) s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("max_split_size: blocks at or above it are never split") {
  SimAlloc s("max_split_size_mb:40");
  void* p = s.a.allocate(50 * MiB + 1);  // segment 52 MiB, remainder ~2 MiB not split (oversize)
  CHECK(s.stats().allocated_bytes.all().current == static_cast<std::int64_t>(52 * MiB));
  CHECK(s.stats().inactive_split.all().current == 0);
  void* q = s.a.allocate(39 * MiB);  // below max_split: segment 40 MiB, remainder 1 MiB not > 1 MiB
  CHECK(s.stats().allocated_bytes.all().current == static_cast<std::int64_t>(92 * MiB));
  s.a.deallocate(p);
  s.a.deallocate(q);
  s.a.validate();
}

TEST_CASE("max_non_split_rounding_mb widens what an oversize request may take") {
  SimAlloc s("max_split_size_mb:40,max_non_split_rounding_mb:40");
  void* big = s.a.allocate(80 * MiB);
  s.a.deallocate(big);
  void* p = s.a.allocate(45 * MiB);  // 80 < 45 + 40
  CHECK(p == big);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("stats: reset_peak and reset_accumulated follow PyTorch") {
  SimAlloc s;
  void* a = s.a.allocate(4 * MiB);
  void* b = s.a.allocate(4 * MiB);
  s.a.deallocate(a);
  auto st = s.stats();
  CHECK(st.allocated_bytes.all().current == static_cast<std::int64_t>(4 * MiB));
  CHECK(st.allocated_bytes.all().peak == static_cast<std::int64_t>(8 * MiB));
  CHECK(st.allocated_bytes.all().allocated == static_cast<std::int64_t>(8 * MiB));
  CHECK(st.allocated_bytes.all().freed == static_cast<std::int64_t>(4 * MiB));
  s.a.reset_peak_memory_stats();
  CHECK(s.stats().allocated_bytes.all().peak == static_cast<std::int64_t>(4 * MiB));
  CHECK(s.stats().allocated_bytes.all().allocated == static_cast<std::int64_t>(8 * MiB));
  s.a.reset_accumulated_memory_stats();
  st = s.stats();
  CHECK(st.allocated_bytes.all().allocated == 0);
  CHECK(st.allocated_bytes.all().freed == 0);
  CHECK(st.allocated_bytes.all().current == static_cast<std::int64_t>(4 * MiB));
  CHECK(st.num_device_alloc == 0);
  CHECK(st.segment.all().current == 1);
  s.a.deallocate(b);
  s.a.validate();
  // Gauges keep lifetime totals through resets.
  CHECK(s.a.gauges().total_allocations == 2);
  CHECK(s.a.gauges().total_frees == 2);
}

TEST_CASE("as_map has exactly PyTorch's keys") {
  SimAlloc s;
  const auto m = s.stats().as_map();
  // 9 pooled stats x 3 pools x 4 metrics + 2 single stats x 4 + 5 counters + max_split_size
  CHECK(m.size() == 9 * 3 * 4 + 2 * 4 + 5 + 1);
  for (const char* key :
       {"allocation.all.current", "allocated_bytes.small_pool.peak", "active.large_pool.freed",
        "active_bytes.all.allocated", "inactive_split.all.current", "inactive_split_bytes.large_pool.peak",
        "requested_bytes.all.current", "segment.small_pool.current", "reserved_bytes.all.peak",
        "oversize_allocations.current", "oversize_segments.peak", "num_alloc_retries", "num_ooms",
        "num_sync_all_streams", "num_device_alloc", "num_device_free", "max_split_size"}) {
    CHECK(m.count(key) == 1);
  }
  CHECK(m.count("allocated.all.current") == 0);  // PyTorch's docstring typo; the key is allocation.*
  CHECK(m.at("max_split_size") == -1);
}

TEST_CASE("empty_cache returns whole free segments and keeps split ones") {
  SimAlloc s;
  void* a = s.a.allocate(4096);      // small segment, stays split (live)
  void* b = s.a.allocate(30 * MiB);  // large segment
  s.a.deallocate(b);
  CHECK(s.stats().reserved_bytes.all().current == static_cast<std::int64_t>(32 * MiB));
  s.a.empty_cache();
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(2 * MiB));
  CHECK(st.num_device_free == 1);
  CHECK(st.num_sync_all_streams == 1);
  CHECK(s.sim().used_bytes() == 2 * MiB);
  s.a.deallocate(a);
  s.a.empty_cache();
  CHECK(s.stats().reserved_bytes.all().current == 0);
  CHECK(s.sim().used_bytes() == 0);
  s.a.validate();
}

TEST_CASE("zero-byte requests and nullptr frees") {
  SimAlloc s;
  CHECK(s.a.allocate(0) == nullptr);
  s.a.deallocate(nullptr);
  CHECK(s.stats().allocation.all().allocated == 0);
  s.a.validate();
}
