// Cross-stream safety: a block used on another stream waits for that stream's events.
#include <memory>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/shard_registry.hpp"
#include "sim_allocator.hpp"

// A stream handle is a pointer to an opaque type (cudaStream_t is CUstream_st*). Stream(T*) is
// explicit, so a handle and a device pointer given in the wrong order do not compile.
namespace {
struct OpaqueStream;
template <class A>
concept records_swapped = requires(A& a, OpaqueStream* handle, void* ptr) {
  a.record_stream(handle, ptr);
};
template <class A>
concept records_in_order = requires(A& a, OpaqueStream* handle, void* ptr) {
  a.record_stream(ptr, gmp::Stream(handle));
};
template <class A>
concept allocates_on_bare_handle = requires(A& a, OpaqueStream* handle) {
  a.allocate(64, handle);
};
static_assert(!records_swapped<SimAllocator>, "record_stream(stream, ptr) must not compile");
static_assert(records_in_order<SimAllocator>);
static_assert(!allocates_on_bare_handle<SimAllocator>, "a stream handle converts to Stream only explicitly");
static_assert(!std::is_convertible_v<void*, gmp::Stream>);
static_assert(std::is_constructible_v<gmp::Stream, OpaqueStream*>);
}  // namespace

TEST_CASE("record_stream: the block is not reused before the other stream's work completes") {
  SimAlloc s;
  const gmp::Stream s0(0), s1(1);
  void* p = s.a.allocate(4096, s0);
  s.a.record_stream(p, s1);
  s.a.deallocate(p);
  s.a.validate();
  auto st = s.stats();
  CHECK(st.allocation.all().current == 0);  // the client gave it up...
  CHECK(st.active.all().current == 1);      // ...but it is still active, pending free
  CHECK(st.active_bytes.all().current == 4096);
  CHECK(s.sim().pending_events() == 1);

  void* q = s.a.allocate(4096, s0);  // the event is pending: p's block is not handed out
  CHECK(q != p);
  s.a.validate();

  s.sim().complete_events(s1);       // s1's work finished
  void* r = s.a.allocate(4096, s0);  // the next allocation processes events and frees p's block
  s.a.validate();
  CHECK(r == p);
  CHECK(s.sim().pending_events() == 0);
  s.a.deallocate(q);
  s.a.deallocate(r);
  s.a.validate();
  st = s.stats();
  CHECK(st.active.all().current == 0);
}

TEST_CASE("record_stream on the block's own stream is a no-op; duplicates record one event") {
  SimAlloc s;
  const gmp::Stream s1(1), s2(2);
  void* p = s.a.allocate(4096, s1);
  s.a.record_stream(p, s1);
  s.a.deallocate(p);
  CHECK(s.sim().counters().events_recorded == 0);
  CHECK(s.a.allocate(4096, s1) == p);
  s.a.record_stream(p, s2);
  s.a.record_stream(p, s2);
  s.a.deallocate(p);
  CHECK(s.sim().counters().events_recorded == 1);
  s.a.validate();
}

TEST_CASE("a block used on two other streams waits for both") {
  SimAlloc s;
  const gmp::Stream s0(0), s1(1), s2(2);
  void* p = s.a.allocate(4096, s0);
  s.a.record_stream(p, s1);
  s.a.record_stream(p, s2);
  s.a.deallocate(p);
  s.sim().complete_events(s1);
  void* q = s.a.allocate(4096, s0);
  CHECK(q != p);  // s2 still running
  s.sim().complete_events(s2);
  void* r = s.a.allocate(4096, s0);
  CHECK(r == p);
  s.a.deallocate(q);
  s.a.deallocate(r);
  s.a.validate();
}

TEST_CASE("events on one stream are processed in recording order once complete") {
  SimAlloc s;
  const gmp::Stream s0(0), s1(1);
  void* a = s.a.allocate(4096, s0);
  void* b = s.a.allocate(8192, s0);
  s.a.record_stream(a, s1);
  s.a.deallocate(a);  // event e1 on s1
  s.a.record_stream(b, s1);
  s.a.deallocate(b);  // event e2 on s1
  CHECK(s.sim().pending_events() == 2);
  s.sim().complete_all_events();
  void* c = s.a.allocate(512, s0);  // both processed; a and b merge back into the segment
  s.a.validate();
  CHECK(s.stats().active.all().current == 1);
  s.a.deallocate(c);
  s.a.validate();
}

TEST_CASE("empty_cache synchronizes pending events, frees the blocks and releases whole segments") {
  SimAlloc s;
  const gmp::Stream s0(0), s1(1);
  void* p = s.a.allocate(30 * MiB, s0);
  s.a.record_stream(p, s1);
  s.a.deallocate(p);
  CHECK(s.stats().reserved_bytes.all().current == static_cast<std::int64_t>(30 * MiB));
  s.a.empty_cache();
  s.a.validate();
  const auto st = s.stats();
  CHECK(st.reserved_bytes.all().current == 0);
  CHECK(st.active.all().current == 0);
  CHECK(st.num_sync_all_streams == 1);
  CHECK(s.sim().counters().event_synchronizations == 1);
}

TEST_CASE("pending-free neighbours do not merge until their events complete") {
  SimAlloc s;
  const gmp::Stream s0(0), s1(1);
  void* a = s.a.allocate(1024, s0);
  void* b = s.a.allocate(1024, s0);
  void* c = s.a.allocate(1024, s0);
  s.a.record_stream(b, s1);
  s.a.deallocate(b);  // pending
  s.a.deallocate(a);  // free, but its neighbour b is pending: no merge
  s.a.validate();
  CHECK(s.stats().inactive_split.all().current == 2);  // a, and the tail after c
  s.sim().complete_events(s1);
  s.a.deallocate(c);
  void* d = s.a.allocate(512, s0);  // processes b's event: a, b, c and the tail merge
  s.a.validate();
  CHECK(d == a);
  s.a.deallocate(d);
  s.a.validate();
  CHECK(s.stats().inactive_split.all().current == 0);
}

// The hot path finds a stream's shard without a lock in a hash table of the first kFastShards
// default-pool shards (shard_registry.hpp): every one of them by its own stream, whatever the
// handles look like (aligned pointers, small ids, 0 for the default stream); later ones and
// private pools' shards only under the lock (find).
TEST_CASE("shard registry: the first kFastShards default-pool shards are found lock-free, by stream") {
  using gmp::detail::Shard;
  using gmp::detail::ShardRegistry;
  ShardRegistry reg;
  std::vector<Shard*> made;
  const std::size_t n = ShardRegistry::kFastShards + 40;
  for (std::size_t i = 0; i < n; ++i) {
    // Default stream, small ids, then pointer-like handles 0x7f...000 + 0x200 * i.
    const std::uintptr_t id = i == 0 ? 0 : i < 8 ? i : std::uintptr_t{0x7f3a12000000} + 0x200 * i;
    reg.reserve_one();
    made.push_back(&reg.add(std::make_unique<Shard>(gmp::Stream(id))));
    if (i % 50 == 0) {  // a private pool's shard of the same stream: never found lock-free
      reg.reserve_one();
      reg.add(std::make_unique<Shard>(gmp::Stream(id), 1));
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const gmp::Stream s = made[i]->stream;
    CHECK(reg.find(s) == made[i]);
    CHECK(reg.find_fast(s) == (i < ShardRegistry::kFastShards ? made[i] : nullptr));
  }
  CHECK(reg.find_fast(gmp::Stream(std::uintptr_t{0x1234560})) == nullptr);  // never added
  CHECK(reg.find(made[50]->stream, 1) != nullptr);
  CHECK(reg.find(made[50]->stream, 1) != made[50]);
}

// Many streams on one allocator (more than the lock-free table holds), each with allocations on
// the hot path: every block goes back to its own stream's shard.
TEST_CASE("more streams than kFastShards: each stream's blocks stay its own") {
  SimAlloc s;
  const std::size_t n = gmp::detail::ShardRegistry::kFastShards + 20;
  std::vector<void*> ptrs;
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 1; i <= n; ++i) ptrs.push_back(s.a.allocate(4096, gmp::Stream(i * 0x1000)));
    for (void* p : ptrs) s.a.deallocate(p);
    ptrs.clear();
  }
  s.a.validate();
  const auto st = s.a.memory_stats();
  CHECK(st.allocation.all().current == 0);
  CHECK(st.segment.all().current == static_cast<std::int64_t>(n));  // one small segment per stream
  CHECK(st.num_device_alloc == static_cast<std::int64_t>(n));       // the second round reused them
}
