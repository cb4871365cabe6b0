// release_stream: a C++ user destroys a stream that cached, pending or live memory still refers
// to. The simulated device throws on any use of a destroyed stream's handle, so every step after
// release_stream() shows that the allocator never names the handle again.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "sim_allocator.hpp"

namespace {
// The segment holding `p`, from segments().
gmp::SegmentView segment_of(const SimAllocator& a, const void* p) {
  for (const auto& s : a.segments()) {
    if (addr(p) >= s.address && addr(p) < s.address + s.size) return s;
  }
  FAIL("no segment holds the pointer");
  return {};
}
bool any_segment_on(const SimAllocator& a, gmp::Stream stream) {
  const auto segs = a.segments();
  return std::any_of(segs.begin(), segs.end(), [stream](const gmp::SegmentView& s) { return s.stream == stream; });
}
}  // namespace

TEST_CASE("release_stream: cached, pending and live memory of a destroyed stream") {
  SimAlloc s;
  const gmp::Stream s0, s1(0x51), s2(0x52);
  void* live1 = s.a.allocate(1000, s1);        // a small segment of s1: live block + free remainder
  s.a.deallocate(s.a.allocate(30 * MiB, s1));  // a whole free segment of s1
  void* b0 = s.a.allocate(4096, s0);
  s.a.record_stream(b0, s1);  // a live block of s0 used on s1
  void* c1 = s.a.allocate(8192, s1);
  s.a.record_stream(c1, s2);
  s.a.deallocate(c1);  // s1's block, pending on an event of s2
  void* d0 = s.a.allocate(2000, s0);
  s.a.record_stream(d0, s1);
  s.a.deallocate(d0);  // s0's block, pending on an event of s1
  s.a.validate();
  REQUIRE(s.sim().pending_events() == 2);
  const auto before = s.stats();
  const auto frees_before = s.sim().counters().free_calls;

  s.a.release_stream(s1);
  s.sim().destroy_stream(s1);
  s.a.validate();
  const auto after = s.stats();
  CHECK(s.sim().counters().free_calls == frees_before + 1);  // the free 30 MiB segment went back
  const auto segment_bytes = static_cast<std::int64_t>(30 * MiB);
  CHECK(after.reserved_bytes.all().current == before.reserved_bytes.all().current - segment_bytes);
  CHECK(after.active.all().current == before.active.all().current - 1);  // d0's block is free now
  CHECK(after.allocation.all().current == 2);                            // live1 and b0
  CHECK(!any_segment_on(s.a, s1));
  CHECK(segment_of(s.a, live1).stream == s0);  // moved to the default stream with its free remainder

  // Later frees, reuse, the events of other streams and empty_cache never name s1.
  s.a.deallocate(b0);  // its use on s1 is complete: freed at once, no event recorded on s1
  CHECK(s.stats().active.all().current == after.active.all().current - 1);
  void* again = s.a.allocate(1000, s0);  // the moved remainder serves the default stream
  CHECK(segment_of(s.a, again).address == segment_of(s.a, live1).address);
  s.a.deallocate(live1);
  s.a.deallocate(again);
  s.sim().complete_events(s2);
  s.a.deallocate(s.a.allocate(512, s0));  // processes s2's event: c1's block is free
  CHECK(s.sim().pending_events() == 0);
  s.a.validate();

  // A new stream with the same handle starts with no memory of the old one.
  s.sim().create_stream(s1);
  void* fresh = s.a.allocate(1000, s1);
  const auto seg = segment_of(s.a, fresh);
  CHECK(seg.stream == s1);
  CHECK(std::count_if(seg.blocks.begin(), seg.blocks.end(),
                      [](const gmp::BlockView& b) { return b.state != gmp::BlockState::inactive; }) == 1);
  s.a.deallocate(fresh);
  s.a.empty_cache();
  s.a.validate();
  CHECK(s.stats().reserved_bytes.all().current == 0);
}

TEST_CASE("release_stream: expandable segments of a destroyed stream") {
  // a2 keeps the pages it touches: 20 MiB pages [20, 80) MiB with PyTorch's policy, 2 MiB pages
  // [30, 70) with the compacting one.
  const auto [conf, kept] = GENERATE(table<const char*, std::size_t>(
      {{"expandable_segments:True", 60 * MiB}, {"compacting_expandable_segments:True", 40 * MiB}}));
  INFO(conf);
  SimAlloc s(conf, 256 * MiB);
  const gmp::Stream s1(0x61), s2(0x62);
  void* a1 = s.a.allocate(30 * MiB, s1);
  void* a2 = s.a.allocate(40 * MiB, s1);
  s.a.deallocate(a1);  // free pages of s1
  s.a.release_stream(s1);
  s.sim().destroy_stream(s1);
  s.a.validate();
  CHECK(s.stats().reserved_bytes.all().current == static_cast<std::int64_t>(kept));  // free pages unmapped
  CHECK(!any_segment_on(s.a, s1));
  // a2's pages, free again, are recycled for another stream: the page move synchronizes the
  // segment's stream, now the default one (s1's handle would throw).
  s.a.deallocate(a2);
  void* big = s.a.allocate(230 * MiB, s2);
  s.a.validate();
  CHECK(s.stats().reserved_bytes.all().current <= static_cast<std::int64_t>(256 * MiB));
  s.a.deallocate(big);
  s.a.empty_cache();
  s.a.validate();
  CHECK(s.stats().reserved_bytes.all().current == 0);
  CHECK(s.sim().reservation_count() == 0);
}

TEST_CASE("release_stream: without it, a destroyed stream's handle is used again") {
  // The failure release_stream prevents: a block used on a destroyed stream records an event on
  // it at free.
  SimAlloc s;
  const gmp::Stream s1(0x71);
  void* p = s.a.allocate(4096);
  s.a.record_stream(p, s1);
  s.sim().destroy_stream(s1);
  CHECK_THROWS_AS(s.a.deallocate(p), gmp::DeviceRuntimeError);
  s.a.validate();  // the free failed cleanly: p is still allocated
  s.sim().create_stream(s1);
  s.a.deallocate(p);
}

TEST_CASE("release_stream: the default stream, and the free function") {
  SimAlloc s;
  CHECK_THROWS_AS(s.a.release_stream(gmp::Stream{}), std::invalid_argument);
  const gmp::Device dev("sim:6");
  void* p = gmp::default_allocator(dev).allocate(3 * MiB, gmp::Stream(0x81));
  gmp::default_allocator(dev).deallocate(p);
  gmp::release_stream(gmp::Stream(0x81), dev);
  CHECK(gmp::memory_reserved(dev) == 0);
}
