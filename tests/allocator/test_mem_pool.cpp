// MemPool and the scopes that route allocations to it (torch.cuda.MemPool, use_mem_pool), on the
// simulated device: ids and use counts as PyTorch's, routing by thread, the pool's own stats,
// use_on_oom, no_split, and when a pool's memory goes back to the device.
#include <stdexcept>
#include <thread>

#include "catch.hpp"
#include "gpumemprof/allocator/mem_pool.hpp"
#include "sim_allocator.hpp"

namespace {
using SimPool = gmp::BasicMemPool<SimAllocator>;
}  // namespace

TEST_CASE("MemPool: ids, use counts and routing of this thread's allocations") {
  SimAlloc sa;
  auto& a = sa.a;
  SimPool pool(a);
  CHECK(pool.id().first == 0);
  CHECK(pool.id().second > 0);
  SimPool other(a);
  CHECK(other.id().second > pool.id().second);
  CHECK(pool.use_count() == 1);
  void* in_pool = nullptr;
  void* outside = nullptr;
  {
    gmp::UseMemPool use(pool);
    CHECK(pool.use_count() == 2);
    in_pool = a.allocate(5 * MiB);
    std::thread([&] { outside = a.allocate(5 * MiB); }).join();  // another thread: not routed
    a.validate();
  }
  CHECK(pool.use_count() == 1);
  CHECK(pool_of(a, in_pool) == pool.id());
  CHECK(pool_of(a, outside).is_default());
  const gmp::PoolStats st = pool.stats();
  CHECK(st.segments == 1);
  CHECK(st.reserved_bytes == static_cast<std::int64_t>(20 * MiB));
  CHECK(st.allocations == 1);
  CHECK(st.allocated_bytes == static_cast<std::int64_t>(5 * MiB));
  CHECK(st.requested_bytes == static_cast<std::int64_t>(5 * MiB));
  // The pool's free blocks serve only allocations routed to it.
  a.deallocate(in_pool);
  void* again = a.allocate(5 * MiB);
  CHECK(pool_of(a, again).is_default());
  {
    gmp::UseMemPool use(pool);
    void* back = a.allocate(5 * MiB);
    CHECK(back == in_pool);
    a.deallocate(back);
  }
  a.deallocate(again);
  a.deallocate(outside);
  // memory_stats count every pool; the pool's own stats only its own.
  CHECK(sa.stats().reserved_bytes.all().current == static_cast<std::int64_t>(40 * MiB));
  a.validate();
  CHECK(a.all_pool_stats().size() == 2);
}

TEST_CASE("MemPool: a released pool gives its memory back when its last block is freed") {
  SimAlloc sa;
  auto& a = sa.a;
  void* live = nullptr;
  gmp::MempoolId id;
  {
    SimPool pool(a);
    id = pool.id();
    gmp::UseMemPool use(pool);
    live = a.allocate(30 * MiB);
    void* freed = a.allocate(30 * MiB);
    a.deallocate(freed);
  }  // pool gone: its free segment goes back now, the live one stays
  CHECK(sa.stats().reserved_bytes.all().current == static_cast<std::int64_t>(30 * MiB));
  const auto st = a.pool_stats(id);
  REQUIRE(st);
  CHECK(st->use_count == 0);
  CHECK(st->segments == 1);
  a.validate();
  a.deallocate(live);
  CHECK(sa.stats().reserved_bytes.all().current == 0);
  CHECK_FALSE(a.pool_stats(id));
  a.validate();
  CHECK_THROWS_AS(a.release_pool(id), std::invalid_argument);
  CHECK_THROWS_AS(a.end_allocate_to_pool(id), std::invalid_argument);
}

TEST_CASE("MemPool: use_on_oom lends its cached blocks to the default pool before an OOM") {
  SimAlloc sa("", 100 * MiB);
  auto& a = sa.a;
  SimPool lender(a, gmp::MemPoolOptions{.use_on_oom = true});
  {
    gmp::UseMemPool use(lender);
    a.deallocate(a.allocate(60 * MiB));  // a cached 60 MiB segment of the pool
  }
  void* p = a.allocate(50 * MiB);  // the device has 40 MiB left: the pool lends its block
  CHECK(pool_of(a, p) == lender.id());
  a.validate();
  a.deallocate(p);
  SimPool keeper(a);  // without use_on_oom: OOM
  {
    gmp::UseMemPool use(keeper);
    a.deallocate(a.allocate(30 * MiB));
  }
  CHECK_THROWS_AS(a.allocate(90 * MiB), gmp::OutOfMemoryError);
  a.validate();
}

TEST_CASE("MemPool: no_split pools hand out whole blocks") {
  SimAlloc sa;
  auto& a = sa.a;
  SimPool whole(a, gmp::MemPoolOptions{.no_split = true});
  gmp::UseMemPool use(whole);
  void* p = a.allocate(4 * MiB);  // a 20 MiB segment, not split
  const auto st = whole.stats();
  CHECK(st.allocated_bytes == static_cast<std::int64_t>(20 * MiB));
  CHECK(st.requested_bytes == static_cast<std::int64_t>(4 * MiB));
  void* q = a.allocate(4 * MiB);  // a second segment
  CHECK(whole.stats().segments == 2);
  a.deallocate(p);
  a.deallocate(q);
  a.validate();
}
