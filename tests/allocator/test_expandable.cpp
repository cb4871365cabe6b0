// compacting_expandable_segments:True (gpumemprof's compacting policy) on the simulated device
// (2 MiB pages): exact pages, segments and stats through growth, recycling, shrinking, OOM,
// record_stream and two streams. PyTorch's policy (expandable_segments:True):
// test_expandable_pytorch.cpp.
#include <array>
#include <string>

#include "../units.hpp"
#include "catch.hpp"
#include "gpumemprof/device/host.hpp"
#include "sim_allocator.hpp"

namespace {

struct Expandable : SimAlloc {
  explicit Expandable(std::size_t capacity = GiB) : SimAlloc("compacting_expandable_segments:True", capacity) {}
  [[nodiscard]] std::int64_t reserved() const { return stats().reserved_bytes.all().current; }
  [[nodiscard]] std::uintptr_t base() { return a.segments().at(0).address; }
  // Map calls, pages mapped, unmap calls, pages unmapped, stream synchronizations.
  using Calls = std::array<std::size_t, 5>;
  [[nodiscard]] Calls calls() {
    const auto c = sim().counters();
    return {c.map_calls, c.pages_mapped, c.unmap_calls, c.pages_unmapped, c.stream_synchronizations};
  }
  // One allocation, then where it landed (from `origin`, the reservation's base), the device calls
  // so far and the reserved bytes.
  std::uintptr_t origin = 0;
  void* step(std::size_t bytes, std::size_t at, Calls want, std::int64_t reserved_mib) {
    void* p = a.allocate(bytes);
    check();
    CHECK(addr(p) == origin + at);
    CHECK(calls() == want);
    CHECK(reserved() == reserved_mib * iMiB);
    return p;
  }
  // The device's account agrees with the allocator's after every step.
  void check() {
    a.validate();
    CHECK(static_cast<std::int64_t>(sim().mapped_bytes()) == reserved());
  }
};

}  // namespace

TEST_CASE("expandable: needs a device with virtual memory") {
  for (const char* conf : {"expandable_segments:True", "compacting_expandable_segments:True"}) {
    CHECK_THROWS_AS(gmp::CachingAllocator<gmp::HostBackend>(gmp::HostBackend{}, gmp::AllocatorConfig(conf)),
                    gmp::ConfigError);
  }
}

TEST_CASE("expandable: grows page by page, contiguously; a growth of several pages maps fresh ones") {
  Expandable e;
  void* p = e.a.allocate(3 * MiB);  // a reservation of 9/8 GiB; two pages mapped
  e.check();
  const std::uintptr_t base = addr(p);
  CHECK(e.sim().reservation_count() == 1);
  CHECK(e.reserved() == 4 * iMiB);
  auto st = e.stats();
  CHECK(st.num_device_alloc == 1);
  CHECK(st.segment.all().current == 0);  // PyTorch counts no segments for expandable memory
  CHECK(st.reserved_bytes[gmp::StatPool::large_pool].current == 4 * iMiB);
  CHECK(e.sim().counters().map_calls == 1);
  auto segs = e.a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].is_expandable);
  CHECK(segs[0].address == base);
  CHECK(segs[0].size == 4 * MiB);
  REQUIRE(segs[0].blocks.size() == 2);
  CHECK(segs[0].blocks[1].size == MiB);  // the rest of the second page, free

  // 2.5 MiB: the free MiB plus one more page, right behind p.
  void* q = e.a.allocate(5 * MiB / 2);
  e.check();
  CHECK(addr(q) == base + 3 * MiB);
  CHECK(e.reserved() == 6 * iMiB);
  CHECK(e.stats().num_device_alloc == 2);

  // Freeing p leaves pages [0, 2) MiB wholly free; 4 MiB go at 5.5 MiB, mapping two pages: a
  // growth of several pages maps fresh ones and moves none (a one-page growth beyond the budget
  // does move one: below). Before, p's free page was unmapped (recycled) first.
  e.a.deallocate(p);
  e.check();
  void* r = e.a.allocate(4 * MiB);
  e.check();
  CHECK(addr(r) == base + 11 * MiB / 2);
  CHECK(e.reserved() == 10 * iMiB);
  st = e.stats();
  CHECK(st.num_device_alloc == 3);
  CHECK(st.num_device_free == 0);
  CHECK(e.sim().counters().unmap_calls == 0);
  CHECK(e.sim().counters().stream_synchronizations == 0);
  CHECK(st.inactive_split.all().current == 0);  // not counted for expandable memory
  segs = e.a.segments();
  REQUIRE(segs.size() == 1);  // one run of mapped pages
  CHECK(segs[0].address == base);
  CHECK(segs[0].size == 10 * MiB);
  REQUIRE(segs[0].blocks.size() == 4);
  CHECK(segs[0].blocks[0].state == gmp::BlockState::inactive);
  CHECK(segs[0].blocks[0].size == 3 * MiB);

  // empty_cache while q and r live: p's wholly free page goes (one unmap, after a stream
  // synchronization); the run of mapped pages now starts above the hole.
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 8 * iMiB);
  CHECK(e.sim().counters().unmap_calls == 1);
  CHECK(e.a.segments().at(0).address == base + 2 * MiB);
  // With everything freed, empty_cache unmaps every page and gives the reservation back.
  e.a.deallocate(q);
  e.a.deallocate(r);
  e.check();
  CHECK(e.reserved() == 8 * iMiB);  // cached
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
  CHECK(e.sim().reservation_count() == 0);
  CHECK(e.sim().counters().releases == 1);
  CHECK(e.stats().num_device_free == 2);
  CHECK(e.a.segments().empty());
}

TEST_CASE("expandable: a cached block is reused without mapping; small requests get their own reservation") {
  Expandable e;
  void* p = e.a.allocate(10 * MiB);
  e.a.deallocate(p);
  void* q = e.a.allocate(6 * MiB);  // best fit in the 10 MiB free block
  e.check();
  CHECK(q == p);
  void* r = e.a.allocate(4 * MiB);  // its 4 MiB tail
  e.check();
  CHECK(addr(r) == addr(q) + 6 * MiB);
  CHECK(e.stats().num_device_alloc == 1);
  // Small pool: a second reservation and one fresh page (no free page anywhere to recycle).
  void* s = e.a.allocate(1000);
  e.check();
  CHECK(e.sim().reservation_count() == 2);
  auto st = e.stats();
  CHECK(st.reserved_bytes[gmp::StatPool::small_pool].current == 2 * iMiB);
  CHECK(st.reserved_bytes[gmp::StatPool::large_pool].current == 10 * iMiB);
  CHECK(e.reserved() == 12 * iMiB);
  CHECK(st.num_device_free == 0);
  void* t = e.a.allocate(1000);  // the same page, split
  CHECK(addr(t) == addr(s) + 1024);
  CHECK(e.stats().num_device_alloc == 2);
  for (void* x : {q, r, s, t}) e.a.deallocate(x);
  e.check();
}

// The small pool's first page is mapped, never taken from the large pool: a warm cache holds the
// small pool's pages from the start, and the cold one places its first small requests as it does
// (ExpandableExecutor::spill_block). Once the small pool has pages, a small request that its pages
// cannot serve takes a free block of the large pool before it maps (or moves) a page.
std::int64_t small_reserved(Expandable& e) { return e.stats().reserved_bytes[gmp::StatPool::small_pool].current; }

// Fills the small pool's one page, whose first 1024 bytes hold a request: the next small request
// finds no room there.
std::array<void*, 2> fill_small_page(Expandable& e) { return {e.a.allocate(1 * MiB), e.a.allocate(1 * MiB - 1024)}; }

TEST_CASE("expandable: a small request that would move a page takes a free block of the large pool") {
  Expandable e;
  using C = Expandable::Calls;
  void* w = e.a.allocate(6 * MiB);  // three pages of the large pool
  e.check();
  e.origin = addr(w);
  e.a.deallocate(w);
  // 6 MiB were live at most, so reserved may reach 6.15 MiB: the small pool's first page is one of
  // w's, unmapped there (after a stream synchronization) and mapped in a reservation of its own.
  void* s = e.a.allocate(1000);
  e.check();
  CHECK(e.calls() == C{2, 4, 1, 1, 1});
  CHECK(e.sim().reservation_count() == 2);
  CHECK(small_reserved(e) == 2 * iMiB);
  CHECK(e.reserved() == 6 * iMiB);
  const auto fill = fill_small_page(e);
  // A page of its own would move another of w's; the request takes a free large block instead: no
  // device call, counted in the large pool.
  void* t = e.a.allocate(1000);
  e.check();
  CHECK(addr(t) == e.origin);  // the front of w's free block (the page that moved was its top one)
  CHECK(e.calls() == C{2, 4, 1, 1, 1});
  auto st = e.stats();
  CHECK(st.allocated_bytes[gmp::StatPool::large_pool].current == 1024);
  CHECK(st.allocated_bytes[gmp::StatPool::small_pool].current == 2 * iMiB);
  CHECK(small_reserved(e) == 2 * iMiB);
  for (void* x : {s, fill[0], fill[1], t}) e.a.deallocate(x);
  e.check();
  CHECK(e.reserved() == 6 * iMiB);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
}

TEST_CASE("expandable: a small request takes a free large block before mapping, within the budget too") {
  Expandable e;
  using C = Expandable::Calls;
  void* x = e.a.allocate(192 * MiB);  // [0, 192) MiB
  void* w = e.a.allocate(6 * MiB);    // [192, 198): 198 MiB live at most
  e.origin = addr(x);
  e.a.deallocate(w);
  // Reserved may reach 202.95 MiB, so the small pool's first page is a fresh one, in a reservation
  // of its own.
  void* s = e.a.allocate(1000);
  e.check();
  CHECK(e.calls() == C{3, 100, 0, 0, 0});
  CHECK(e.sim().reservation_count() == 2);
  CHECK(small_reserved(e) == 2 * iMiB);
  const auto fill = fill_small_page(e);
  // A second page would stay mapped beyond the large pool's layout; the request takes the front of
  // w's free block instead.
  void* t = e.step(1000, 192 * MiB, C{3, 100, 0, 0, 0}, 200);
  // With no free large block left (the rest of w's is taken), it maps a page of its own.
  void* big = e.a.allocate(6 * MiB - 1024);
  void* u = e.a.allocate(1000);
  e.check();
  CHECK(e.calls() == C{4, 101, 0, 0, 0});
  CHECK(small_reserved(e) == 4 * iMiB);
  for (void* p : {x, s, fill[0], fill[1], t, big, u}) e.a.deallocate(p);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
}

TEST_CASE("expandable: OOM when the device is full; the allocator stays consistent and recovers") {
  Expandable e(8 * MiB);
  void* a = e.a.allocate(6 * MiB);
  e.check();
  try {
    (void)e.a.allocate(4 * MiB);
    FAIL("no OutOfMemoryError");
  } catch (const gmp::OutOfMemoryError& err) {
    const std::string m = err.what();
    CHECK(m.find("Tried to allocate 4.00 MiB") != std::string::npos);
    CHECK(m.find("expandable_segments") == std::string::npos);  // already on: not advised again
  }
  e.check();
  auto st = e.stats();
  CHECK(st.num_ooms == 1);
  CHECK(st.num_alloc_retries == 1);
  CHECK(e.reserved() == 6 * iMiB);
  CHECK(e.sim().reservation_count() == 1);  // the reservation tried for the request went back
  e.a.deallocate(a);
  void* b = e.a.allocate(4 * MiB);  // the cached 6 MiB serve it
  e.check();
  CHECK(b == a);
  // 2 MiB remain free at [4, 6) MiB: with one more page (the device's last) they hold 4 MiB.
  void* c = e.a.allocate(4 * MiB);
  e.check();
  CHECK(addr(c) == addr(b) + 4 * MiB);
  CHECK(e.reserved() == 8 * iMiB);
  e.a.deallocate(b);
  e.a.deallocate(c);
  e.check();
}

TEST_CASE("expandable: the OOM sequence unmaps free pages on other streams") {
  Expandable e(8 * MiB);
  const gmp::Stream s1(1), s2(2);
  void* a = e.a.allocate(6 * MiB, s1);
  e.a.deallocate(a);  // 6 MiB cached on s1
  // s2 needs three pages and the device has one free: two of s1's free pages are unmapped and
  // mapped for s2 (beyond the device's free memory pages move whatever the growth): no OOM.
  void* b = e.a.allocate(6 * MiB, s2);
  e.check();
  CHECK(e.reserved() == 8 * iMiB);
  CHECK(e.sim().reservation_count() == 2);
  CHECK(e.sim().counters().unmap_calls == 1);
  CHECK(e.stats().num_ooms == 0);
  e.a.deallocate(b);
  e.check();
}

TEST_CASE("expandable: record_stream keeps a block until the other stream is done") {
  Expandable e;
  const gmp::Stream s0(0), s1(1);
  void* p = e.a.allocate(3 * MiB, s0);
  e.a.record_stream(p, s1);
  e.a.deallocate(p);
  e.check();
  void* q = e.a.allocate(3 * MiB, s0);  // p's block is pending: grow behind it instead
  e.check();
  CHECK(addr(q) == addr(p) + 3 * MiB);
  CHECK(e.reserved() == 6 * iMiB);
  CHECK(e.sim().counters().unmap_calls == 0);  // a pending block is never recycled
  e.sim().complete_events(s1);
  void* r = e.a.allocate(3 * MiB, s0);  // events processed: p's block is reused
  e.check();
  CHECK(r == p);
  for (void* x : {q, r}) e.a.deallocate(x);
  e.check();
}

TEST_CASE("expandable: two streams, each with its own reservation") {
  Expandable e;
  const gmp::Stream s1(1), s2(2);
  void* a = e.a.allocate(3 * MiB, s1);
  void* b = e.a.allocate(3 * MiB, s2);
  e.check();
  CHECK(e.sim().reservation_count() == 2);
  const auto segs = e.a.segments();
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].stream == s1);
  CHECK(segs[1].stream == s2);
  CHECK(e.reserved() == 8 * iMiB);
  e.a.deallocate(a);                    // s1's first page is wholly free
  void* c = e.a.allocate(3 * MiB, s2);  // s2 grows by 2 MiB, taken from s1's free page
  e.check();
  CHECK(addr(c) == addr(b) + 3 * MiB);
  CHECK(e.reserved() == 8 * iMiB);
  CHECK(e.sim().counters().stream_synchronizations == 1);
  e.a.deallocate(b);
  e.a.deallocate(c);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
  CHECK(e.sim().reservation_count() == 0);
}

TEST_CASE("expandable: at the memory fraction's cap, growth recycles free pages, the larger first, as counted") {
  Expandable e;
  e.a.set_memory_fraction(16.0 / 1024);  // 16 MiB: beyond the cap pages move, whatever the growth
  using C = Expandable::Calls;
  void* a = e.a.allocate(8 * MiB);  // [0, 8) MiB
  void* b = e.a.allocate(2 * MiB);  // [8, 10)
  void* c = e.a.allocate(4 * MiB);  // [10, 14)
  void* d = e.a.allocate(2 * MiB);  // [14, 16)
  e.check();
  e.origin = addr(a);
  CHECK(e.calls() == C{4, 8, 0, 0, 0});  // one map call per growth
  CHECK(e.reserved() == 16 * iMiB);
  e.a.deallocate(a);
  e.a.deallocate(c);
  e.check();
  // 12 MiB fit in no free block: mapped at [16, 28), and with nothing left under the cap the free
  // pages of a and c are recycled, the larger first (one unmap call each, one stream
  // synchronization for both). (Where the placement goes with holes to map: the planner's tests.)
  void* big = e.step(12 * MiB, 16 * MiB, C{5, 14, 2, 6, 1}, 16);
  for (void* x : {b, d, big}) e.a.deallocate(x);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
  CHECK(e.calls() == C{5, 14, 4, 14, 2});  // [8, 10) and [14, 28): one unmap call each
}

TEST_CASE("expandable: a growth of several pages maps fresh pages, within 2.5% of the most bytes live or not") {
  Expandable e;
  using C = Expandable::Calls;
  void* w = e.a.allocate(192 * MiB);  // [0, 192) MiB
  void* a = e.a.allocate(4 * MiB);    // [192, 196)
  void* b = e.a.allocate(2 * MiB);    // [196, 198)
  e.check();
  e.origin = addr(w);
  CHECK(e.calls() == C{3, 99, 0, 0, 0});
  e.a.deallocate(a);
  // 6 MiB fit in no free block and go above b. At most 200 MiB were ever live, so reserved may
  // reach 205 MiB: three fresh pages (204 MiB), and a's pages stay mapped -- no unmap, no stream
  // synchronization.
  void* c = e.step(6 * MiB, 198 * MiB, C{4, 102, 0, 0, 0}, 204);
  // A later step's 4 MiB lands where a was, without a device call.
  e.a.deallocate(e.step(4 * MiB, 192 * MiB, C{4, 102, 0, 0, 0}, 204));
  // Beyond the budget too: [0, 196) MiB is free and 198 MiB go above c while 206 MiB are live
  // (reserved may reach 211.15 MiB), yet no page moves: 99 fresh pages, reserved 402 MiB. (Before,
  // 192 MiB of the free pages were unmapped and mapped there: the layout the next step then met
  // was another, and pages kept moving in every step: docs/expandable-segments.md.)
  e.a.deallocate(w);
  void* d = e.step(198 * MiB, 204 * MiB, C{5, 201, 0, 0, 0}, 402);
  for (void* x : {b, c, d}) e.a.deallocate(x);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
}

TEST_CASE("expandable: a one-page growth beyond the budget moves a free page; a larger one maps fresh pages") {
  Expandable e;
  using C = Expandable::Calls;
  void* a = e.a.allocate(2 * MiB);  // [0, 2) MiB
  e.check();
  e.origin = addr(a);
  void* b = e.step(2 * MiB, 2 * MiB, C{2, 2, 0, 0, 0}, 4);      // [2, 4)
  void* c = e.step(3 * MiB / 2, 4 * MiB, C{3, 3, 0, 0, 0}, 6);  // [4, 5.5), large pool
  e.a.deallocate(a);
  // 2.5 MiB fit in no free block and go at 5.5 MiB, mapping one page; 6 MiB are then live at
  // most, so reserved may reach 6.15 MiB: a's free page is unmapped (after a stream
  // synchronization) and mapped there.
  void* d = e.step(5 * MiB / 2, 11 * MiB / 2, C{4, 4, 1, 1, 1}, 6);
  // 5 MiB go above d, mapping three pages while 9 MiB are live (reserved may reach 9.225 MiB):
  // b's free page stays mapped and three fresh pages are mapped. Moving it for a growth of
  // several pages would re-lay out the large tensors (docs/expandable-segments.md).
  e.a.deallocate(b);
  void* f = e.step(5 * MiB, 8 * MiB, C{5, 7, 1, 1, 1}, 12);
  for (void* x : {c, d, f}) e.a.deallocate(x);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
}

TEST_CASE("expandable: recycling takes the pages above the growth from the free block it ends in, last") {
  Expandable e;
  e.a.set_memory_fraction(86.0 / 1024);  // at most 86 MiB mapped: beyond that, pages move for any growth
  using C = Expandable::Calls;
  void* a = e.a.allocate(18 * MiB);  // [0, 18) MiB
  e.check();
  e.origin = addr(a);
  void* b = e.step(2 * MiB, 18 * MiB, C{2, 10, 0, 0, 0}, 20);
  void* c = e.step(40 * MiB, 20 * MiB, C{3, 30, 0, 0, 0}, 60);
  void* s = e.step(2 * MiB, 60 * MiB, C{4, 31, 0, 0, 0}, 62);
  void* g = e.step(10 * MiB, 62 * MiB, C{5, 36, 0, 0, 0}, 72);
  e.a.deallocate(a);
  // 30 MiB at the top while 84 MiB are live: reserved may reach 86 MiB (the memory fraction), so
  // 16 of a's 18 MiB go.
  void* d = e.step(30 * MiB, 72 * MiB, C{6, 51, 1, 8, 1}, 86);
  for (void* x : {b, c, g}) e.a.deallocate(x);
  // [free 0-2][hole 2-18][free 18-60][s][free 62-72][d 72-102]: 50 MiB go at 0, mapping the hole;
  // 86 MiB are mapped, the fraction's cap, so 16 MiB must be recycled: g's five pages, then three of [50, 60)
  // -- the pages above the growth in the block it ends in, taken last (a next growth there would
  // want them back). Before, that block was left out whole: only g's pages went and reserved
  // reached 92 MiB.
  void* f = e.step(50 * MiB, 0, C{7, 59, 3, 16, 2}, 86);
  const auto segs = e.a.segments();
  REQUIRE(segs.size() == 3);
  CHECK(segs[0].size == 54 * MiB);  // f and the free [50, 54)
  CHECK(segs[1].address == e.origin + 60 * MiB);
  CHECK(segs[2].address == e.origin + 72 * MiB);
  for (void* x : {s, d, f}) e.a.deallocate(x);
  e.a.empty_cache();
  e.check();
  CHECK(e.reserved() == 0);
}

TEST_CASE("expandable: with max_split_size set, a small request takes no free large block, on either path") {
  // The spill's rule lives in one place (ExpandableExecutor::spill_block), for the hot path and
  // for the slow one (garbage_collection_threshold keeps a request off the hot path's spill).
  struct Case {
    const char* conf;
    bool spills;
  };
  const Case c = GENERATE(
      Case{"compacting_expandable_segments:True", true},
      Case{"compacting_expandable_segments:True,garbage_collection_threshold:0.9", true},
      Case{"compacting_expandable_segments:True,max_split_size_mb:64", false},
      Case{"compacting_expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.9", false});
  INFO(c.conf);
  SimAlloc s(c.conf, GiB);
  s.a.set_memory_fraction(1.0);  // garbage_collection_threshold acts under a memory fraction only
  // The small pool's first page (mapped: the first small page never spills), filled.
  void* s1 = s.a.allocate(1 * MiB);
  void* s2 = s.a.allocate(1 * MiB);
  void* w = s.a.allocate(6 * MiB);  // three pages of the large pool, free again
  s.a.deallocate(w);
  void* p = s.a.allocate(1000);
  s.a.validate();
  const auto st = s.stats();
  CHECK((addr(p) == addr(w)) == c.spills);  // the front of w's free block, or a page of its own
  CHECK(st.allocated_bytes[gmp::StatPool::large_pool].current == (c.spills ? 1024 : 0));
  CHECK(st.reserved_bytes[gmp::StatPool::small_pool].current == (c.spills ? 2 : 4) * iMiB);
  CHECK(s.sim().reservation_count() == 2u);
  s.a.deallocate(p);
  s.a.deallocate(s1);
  s.a.deallocate(s2);
  s.a.empty_cache();
  s.a.validate();
}

TEST_CASE("compacting: the small pool maps its first page; later small requests take free large blocks") {
  // A warm cache holds the small pool's pages from the start; the cold one maps the first rather
  // than spill into the large pool, so both place the small requests alike (spill_block).
  const bool hot = GENERATE(true, false);  // the hot path's spill, or the slow path's (gc keeps it off the hot one)
  INFO((hot ? "hot path" : "slow path"));
  SimAlloc s(hot ? "compacting_expandable_segments:True"
                 : "compacting_expandable_segments:True,garbage_collection_threshold:0.9",
             GiB);
  s.a.set_memory_fraction(1.0);
  void* w = s.a.allocate(6 * MiB);  // the large pool's pages, free again
  s.a.deallocate(w);
  void* first = s.a.allocate(1000);  // no small page yet: maps one
  CHECK(addr(first) != addr(w));
  CHECK(s.stats().reserved_bytes[gmp::StatPool::small_pool].current == 2 * iMiB);
  void* fill1 = s.a.allocate(1 * MiB);  // the rest of the small page, taken
  void* fill2 = s.a.allocate(1 * MiB - 1024);
  void* more = s.a.allocate(1000);  // the small pool has pages, none free: the large pool's free block
  s.a.validate();
  const auto st = s.stats();
  CHECK(addr(more) == addr(w));
  CHECK(st.reserved_bytes[gmp::StatPool::small_pool].current == 2 * iMiB);
  CHECK(st.allocated_bytes[gmp::StatPool::large_pool].current == 1024);
  for (void* p : {first, fill1, fill2, more}) s.a.deallocate(p);
  s.a.empty_cache();
  s.a.validate();
  CHECK(s.stats().reserved_bytes[gmp::StatPool::all].current == 0);
}
