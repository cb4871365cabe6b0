// compacting_expandable_segments:True (gpumemprof-only) on a real GPU (driver VMM): growth, recycling, shrink, OOM, two
// streams and small requests in large blocks, with kernels writing every allocation and checking
// it after each remapping.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpu_kernels.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;
namespace {
using CudaAllocator = gmp::CachingAllocator<gmp::CudaBackend>;

struct Buffer {
  void* p;
  std::size_t bytes;
  unsigned seed;
  cudaStream_t stream = nullptr;
};
void fill(const Buffer& b) { gpu_test::fill_pattern(b.p, b.bytes / 4, b.seed, b.stream); }
std::size_t bad(const Buffer& b) { return gpu_test::count_mismatches(b.p, b.bytes / 4, b.seed, b.stream); }
std::int64_t reserved(const CudaAllocator& a) { return a.memory_stats().reserved_bytes.all().current; }
// A device address as a number (Catch2 would print a char* as the string it points to).
std::uintptr_t at(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
std::size_t page() { return gmp::CudaBackend(0).granularity(); }
std::size_t up(std::size_t n) { return (n + page() - 1) / page() * page(); }
// Caps what `a` may map at `bytes` (the memory fraction): below the cap, a growth of several pages
// maps fresh ones; at it, free pages move (are unmapped and mapped where they are needed).
void cap_at(CudaAllocator& a, double bytes) {
  std::size_t free = 0, total = 0;
  GPUMEMPROF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  a.set_memory_fraction(bytes / static_cast<double>(total));
}
}  // namespace

TEST_CASE("expandable GPU: grows contiguously, recycles free pages, data intact, shrinks on empty_cache") {
  REQUIRE(gmp::CudaBackend(0).supports_virtual_memory());
  const std::size_t g = page();
  REQUIRE(g == 2 * MiB);  // the figures below assume the usual 2 MiB granularity
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("compacting_expandable_segments:True"));
  const Buffer p{a.allocate(3 * MiB), 3 * MiB, 1};
  const Buffer q{a.allocate(5 * MiB), 5 * MiB, 2};
  const Buffer r{a.allocate(64 * MiB), 64 * MiB, 3};
  a.validate();
  CHECK(at(q.p) == at(p.p) + 3 * MiB);
  CHECK(at(r.p) == at(q.p) + 5 * MiB);
  CHECK(reserved(a) == static_cast<std::int64_t>(up(72 * MiB)));
  for (const Buffer& b : {p, q, r}) fill(b);
  for (const Buffer& b : {p, q, r}) CHECK(bad(b) == 0);
  // p's first page is wholly free once p goes. s needs three pages at the tail; the cap allows
  // two fresh ones, so p's page is unmapped and mapped again at the tail for the third.
  cap_at(a, static_cast<double>(up(72 * MiB) + 4 * MiB) + 0.5 * MiB);
  a.deallocate(p.p);
  const Buffer s{a.allocate(6 * MiB), 6 * MiB, 4};
  a.validate();
  CHECK(reserved(a) == static_cast<std::int64_t>(up(72 * MiB) + 4 * MiB));
  CHECK(a.memory_stats().num_device_free == 1);
  fill(s);
  for (const Buffer& b : {q, r, s}) CHECK(bad(b) == 0);
  for (const Buffer& b : {q, r, s}) a.deallocate(b.p);
  std::size_t free_before = 0, total = 0;
  GPUMEMPROF_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  a.empty_cache();
  a.validate();
  CHECK(reserved(a) == 0);
  std::size_t free_after = 0;
  GPUMEMPROF_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after >= free_before + 70 * MiB);  // the pages went back to the device
}

TEST_CASE("expandable GPU: small requests at the budget take a free large block, data intact") {
  REQUIRE(page() == 2 * MiB);
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("compacting_expandable_segments:True"));
  const Buffer w{a.allocate(6 * MiB), 6 * MiB, 1};
  fill(w);
  CHECK(bad(w) == 0);
  a.deallocate(w.p);
  // The small pool's first page is its own: one of w's, unmapped and mapped again (6 MiB were live
  // at most). Once it is full, small requests take w's free block instead of moving another page.
  const Buffer s{a.allocate(1024), 1024, 2};
  const Buffer f1{a.allocate(1 * MiB), 1 * MiB, 5};
  const Buffer f2{a.allocate(1 * MiB - 1024), 1 * MiB - 1024, 6};
  const Buffer t{a.allocate(1024), 1024, 3};
  const Buffer u{a.allocate(2 * MiB), 2 * MiB, 4};
  a.validate();
  CHECK(at(t.p) == at(w.p));  // the front of w's free block (the page that moved was its top one)
  CHECK(at(u.p) == at(w.p) + 1024);
  const auto st = a.memory_stats();
  CHECK(st.reserved_bytes.all().current == static_cast<std::int64_t>(6 * MiB));
  CHECK(st.reserved_bytes[gmp::StatPool::small_pool].current == static_cast<std::int64_t>(2 * MiB));
  CHECK(st.num_device_alloc == 2);
  CHECK(st.num_device_free == 1);
  for (const Buffer& b : {s, f1, f2, t, u}) fill(b);
  for (const Buffer& b : {s, f1, f2, t, u}) CHECK(bad(b) == 0);
  for (const Buffer& b : {s, f1, f2, t, u}) a.deallocate(b.p);
  a.empty_cache();
  a.validate();
  CHECK(reserved(a) == 0);
}

TEST_CASE("expandable GPU: OOM under a memory fraction, then recovery with intact data") {
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("compacting_expandable_segments:True"));
  cap_at(a, 256.0 * MiB);
  std::vector<Buffer> live;
  unsigned seed = 10;
  bool oom = false;
  while (!oom && live.size() < 100) {
    try {
      live.push_back({a.allocate(40 * MiB), 40 * MiB, seed++});
      fill(live.back());
    } catch (const gmp::OutOfMemoryError&) {
      oom = true;
    }
  }
  CHECK(oom);
  a.validate();
  CHECK(live.size() == 6);  // 6 x 40 MiB fit under 256 MiB, the 7th does not
  CHECK(a.memory_stats().num_ooms == 1);
  for (const Buffer& b : live) CHECK(bad(b) == 0);
  a.deallocate(live[0].p);
  live.erase(live.begin());
  const Buffer again{a.allocate(40 * MiB), 40 * MiB, 99};
  fill(again);
  a.validate();
  for (const Buffer& b : live) CHECK(bad(b) == 0);
  CHECK(bad(again) == 0);
  for (const Buffer& b : live) a.deallocate(b.p);
  a.deallocate(again.p);
  a.empty_cache();
  CHECK(reserved(a) == 0);
}

TEST_CASE("expandable GPU: two streams, one reservation each; pages recycled across them") {
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("compacting_expandable_segments:True"));
  cudaStream_t s1 = nullptr, s2 = nullptr;
  GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const Buffer x{a.allocate(32 * MiB, gmp::Stream(s1)), 32 * MiB, 7, s1};
  const Buffer y{a.allocate(32 * MiB, gmp::Stream(s2)), 32 * MiB, 8, s2};
  fill(x);
  fill(y);
  CHECK(a.segments().size() == 2);
  cap_at(a, 64.5 * MiB);  // at the cap: s2's growth must take pages that are mapped already
  a.deallocate(x.p);      // s1's pages are free; s2 grows by taking them (after s1 is synchronized)
  const Buffer z{a.allocate(16 * MiB, gmp::Stream(s2)), 16 * MiB, 9, s2};
  fill(z);
  a.validate();
  CHECK(reserved(a) == static_cast<std::int64_t>(64 * MiB));
  CHECK(bad(y) == 0);
  CHECK(bad(z) == 0);
  a.deallocate(y.p);
  a.deallocate(z.p);
  a.empty_cache();
  CHECK(reserved(a) == 0);
  GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(s1));
  GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(s2));
}

namespace {
// The physical allocation (driver handle) mapped at `p`, as the driver reports it.
CUmemGenericAllocationHandle handle_at(const void* p) {
  using Retain = CUresult (*)(CUmemGenericAllocationHandle*, void*);
  static Retain retain = nullptr;
  if (retain == nullptr) REQUIRE(gmp::detail::driver_entry(retain, "cuMemRetainAllocationHandle"));
  CUmemGenericAllocationHandle h = 0;
  REQUIRE(retain(&h, const_cast<void*>(p)) == CUDA_SUCCESS);
  REQUIRE(gmp::detail::CudaVmmApi::get().release(h) == CUDA_SUCCESS);  // the retain's reference
  return h;
}
}  // namespace

TEST_CASE("expandable GPU: PyTorch's policy makes one physical allocation per 20 MiB page (2 MiB small)") {
  REQUIRE(gmp::CudaBackend(0).supports_virtual_memory());
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("expandable_segments:True"));
  const Buffer p{a.allocate(3 * MiB), 3 * MiB, 21};
  auto calls = a.backend().vmm_calls();
  CHECK(calls.creates == 1);  // c10: one cuMemCreate and one cuMemMap per page
  CHECK(calls.maps == 1);
  const Buffer q{a.allocate(50 * MiB), 50 * MiB, 22};  // 53 MiB: two more pages, one map of 40 MiB
  const Buffer s{a.allocate(1000), 1000, 23};          // the small pool's reservation: a 2 MiB page
  calls = a.backend().vmm_calls();
  CHECK(calls.creates == 4);
  CHECK(calls.maps == 4);
  CHECK(a.memory_stats().num_device_alloc == 3);  // PyTorch counts map() calls
  // The driver's own view: every 2 MiB of a 20 MiB page is the same physical allocation.
  const auto* base = static_cast<const char*>(p.p);
  CHECK(handle_at(base) == handle_at(base + 18 * MiB));
  CHECK(handle_at(base + 20 * MiB) == handle_at(base + 38 * MiB));
  CHECK(handle_at(base) != handle_at(base + 20 * MiB));
  CHECK(handle_at(base + 40 * MiB) != handle_at(base + 20 * MiB));
  for (const Buffer& b : {p, q, s}) fill(b);
  for (const Buffer& b : {p, q, s}) CHECK(bad(b) == 0);
  a.deallocate(q.p);
  a.empty_cache();  // [20, 60) MiB is free: two whole pages go in one unmap; p's page stays
  calls = a.backend().vmm_calls();
  CHECK(calls.unmaps == 2);
  CHECK(calls.releases == 2);
  CHECK(bad(p) == 0);
  CHECK(bad(s) == 0);
  a.deallocate(p.p);
  a.deallocate(s.p);
  a.empty_cache();
  a.validate();
  CHECK(reserved(a) == 0);
  calls = a.backend().vmm_calls();
  CHECK(calls.releases == calls.creates);
}

TEST_CASE("expandable GPU: the compacting policy's physical allocations are 2 MiB each") {
  REQUIRE(page() == 2 * MiB);
  CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig("compacting_expandable_segments:True"));
  const Buffer p{a.allocate(3 * MiB), 3 * MiB, 31};
  const Buffer q{a.allocate(5 * MiB), 5 * MiB, 32};
  CHECK(a.backend().vmm_calls().creates == 4);
  const auto* base = static_cast<const char*>(p.p);
  CHECK(handle_at(base) != handle_at(base + 2 * MiB));
  a.deallocate(p.p);
  a.empty_cache();  // the free first page alone
  CHECK(a.backend().vmm_calls().releases == 1);
  fill(q);
  CHECK(bad(q) == 0);
  a.deallocate(q.p);
  a.empty_cache();
  CHECK(reserved(a) == 0);
}
