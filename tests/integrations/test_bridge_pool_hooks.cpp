// The PyTorch bridge's CUDA graph hooks (python/torch_pool_hooks.hpp) on the simulated device, called
// in the order torch 2.11 calls them: torch.cuda.graph's capture_begin (begin_allocate_to_pool with a
// filter over cudaStream_t, then cudaStreamBeginCapture), the capture's allocations and frees,
// capture_end (cudaStreamEndCapture, then end_allocate_to_pool), and the graph's reset
// (release_pool); cudagraph trees' per-thread route; Tensor.record_stream without a device. The
// simulated device fails every call capture forbids, as a GPU does. Also: the exported functions
// never throw, with no GPU at all (this machine's case in CI).
#include <cstring>
#include <thread>
#include <vector>

#include "../allocator/sim_allocator.hpp"
#include "catch.hpp"
#include "gpumemprof_torch.h"
#include "torch_pool_hooks.hpp"

namespace gt = gpumemprof_torch;

namespace {
const gmp::Stream s1{1};
const gmp::Stream s2{2};
cudaStream_t cuda_stream(gmp::Stream s) { return s.as<CUstream_st>(); }

}  // namespace

TEST_CASE("bridge hooks: torch.cuda.graph's capture allocates from its pool, legally, and release frees it") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  void* before = a.allocate(1 * MiB, s1);  // the default pool's, from before the capture
  a.deallocate(before);
  const gt::TorchPoolId graph{7, 0};  // what capture_begin makes when no pool is given
  std::vector<cudaStream_t> asked;
  // torch's filter: does this stream capture for this graph? (cudaStreamGetCaptureInfo)
  gt::begin_allocate_to_pool(a, graph, [&](cudaStream_t s) {
    asked.push_back(s);
    return s == cuda_stream(s1) && sa.sim().is_capturing(s1);
  });
  sa.sim().begin_capture(s1);
  void* x = a.allocate(3 * MiB, s1);
  void* small = a.allocate(4096, s1);
  a.deallocate(x);  // freed inside the capture: the capture's next allocation reuses it
  void* y = a.allocate(3 * MiB, s1);
  void* other = a.allocate(1 * MiB, s2);  // a stream outside the capture: the default pool
  CHECK(y == x);
  CHECK(pool_of(a, y) == gmp::MempoolId{7, 0});
  CHECK(pool_of(a, small) == gmp::MempoolId{7, 0});
  CHECK(pool_of(a, other).is_default());
  CHECK(addr(y) != addr(before));
  CHECK(std::find(asked.begin(), asked.end(), cuda_stream(s1)) != asked.end());
  CHECK(std::find(asked.begin(), asked.end(), cuda_stream(s2)) != asked.end());
  CHECK(sa.sim().end_capture(s1));  // the capture stayed valid
  gt::end_allocate_to_pool(a, graph);
  CHECK(sa.sim().counters().capture_violations == 0);
  a.validate();
  // Replays use y and small; the graph keeps its pool until it is destroyed.
  a.deallocate(y);
  a.deallocate(small);
  a.deallocate(other);
  a.empty_cache();
  REQUIRE(a.pool_stats(gmp::MempoolId{7, 0}));
  CHECK(a.pool_stats(gmp::MempoolId{7, 0})->reserved_bytes > 0);
  gt::release_pool(a, graph);  // CUDAGraph::reset
  CHECK_FALSE(a.pool_stats(gmp::MempoolId{7, 0}));
  CHECK(sa.stats().reserved_bytes.all().current == 0);
  a.validate();
  // A second release is the caller's error: thrown here, printed (never thrown) by the export.
  CHECK_THROWS_AS(gt::release_pool(a, graph), std::invalid_argument);
}

TEST_CASE("bridge hooks: graphs sharing graph_pool_handle()'s pool, and cudagraph trees' thread route") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  const gt::TorchPoolId shared{0, 3};  // graph_pool_handle(): (0, N), as make_graphed_callables uses
  void* kept = nullptr;
  for (int g = 0; g < 2; ++g) {
    gt::begin_allocate_to_pool(a, shared, [&](cudaStream_t s) { return s == cuda_stream(s1); });
    sa.sim().begin_capture(s1);
    void* p = a.allocate(2 * MiB, s1);
    CHECK(pool_of(a, p) == gmp::MempoolId{0, 3});
    if (g == 0)
      kept = p;  // the first graph's output, alive while the second captures
    else
      CHECK(p != kept);
    if (g == 1) a.deallocate(p);
    CHECK(sa.sim().end_capture(s1));
    gt::end_allocate_to_pool(a, shared);
  }
  CHECK(a.pool_stats(gmp::MempoolId{0, 3})->use_count == 2);
  a.deallocate(kept);
  gt::release_pool(a, shared);
  CHECK(a.pool_stats(gmp::MempoolId{0, 3}));  // one graph left
  gt::release_pool(a, shared);
  CHECK_FALSE(a.pool_stats(gmp::MempoolId{0, 3}));
  // cudagraph trees' warm-up: this thread's allocations, whatever the stream, go to the pool.
  const auto me = std::this_thread::get_id();
  gt::begin_allocate_to_pool(a, {5, 0}, [me](cudaStream_t) { return std::this_thread::get_id() == me; });
  void* mine = a.allocate(1 * MiB, s2);
  void* theirs = nullptr;
  std::thread([&] { theirs = a.allocate(1 * MiB, s2); }).join();
  gt::end_allocate_to_pool(a, {5, 0});
  CHECK(pool_of(a, mine) == gmp::MempoolId{5, 0});
  CHECK(pool_of(a, theirs).is_default());
  a.deallocate(mine);
  a.deallocate(theirs);
  gt::release_pool(a, {5, 0});
  a.validate();
  // No filter: every allocation is routed.
  gt::begin_allocate_to_pool(a, {6, 0}, nullptr);
  void* any = a.allocate(1 * MiB, s2);
  CHECK(pool_of(a, any) == gmp::MempoolId{6, 0});
  gt::end_allocate_to_pool(a, {6, 0});
  CHECK_THROWS_AS(gt::end_allocate_to_pool(a, {6, 0}), std::invalid_argument);
  a.deallocate(any);
  gt::release_pool(a, {6, 0});
  a.validate();
}

TEST_CASE("bridge hooks: record_stream without a device finds the allocator that holds the pointer") {
  SimAlloc first("", 1 * GiB);
  SimAlloc second("", 1 * GiB);  // events stay pending until completed by hand
  std::vector<SimAllocator*> devices{&first.a, &second.a};
  const std::span<SimAllocator* const> all(devices);
  void* x = second.a.allocate(8 * MiB, s1);
  CHECK(gt::record_stream_in_owner(x, s2, all));
  second.a.deallocate(x);
  void* y = second.a.allocate(8 * MiB, s1);  // right away, while s2's use is pending
  CHECK(y != x);
  // Control: without the record, the block comes back at once.
  void* z = second.a.allocate(8 * MiB, s1);
  second.a.deallocate(z);
  void* z2 = second.a.allocate(8 * MiB, s1);
  CHECK(z2 == z);
  // Memory gpumemprof did not allocate (DLPack, from_blob) and null: left alone, no error.
  int foreign = 0;
  CHECK_FALSE(gt::record_stream_in_owner(&foreign, s2, all));
  CHECK_FALSE(gt::record_stream_in_owner(nullptr, s2, all));
  for (void* p : {y, z2}) second.a.deallocate(p);
  first.a.validate();
  second.a.validate();
}

TEST_CASE("bridge hooks: the exported functions never throw, even with no GPU") {
  // On a host without a GPU every call fails inside; the failure is printed and kept, not thrown
  // (libtorch calls release_pool from a graph's destructor).
  gpumemprof_release_pool(0, {1, 0});
  CHECK(std::strstr(gpumemprof_last_error(), "releasePool") != nullptr);
  gpumemprof_end_allocate_to_pool(0, {1, 0});
  CHECK(std::strstr(gpumemprof_last_error(), "endAllocateToPool") != nullptr);
  gpumemprof_begin_allocate_to_pool(0, {0, 0}, nullptr);
  CHECK(std::strstr(gpumemprof_last_error(), "beginAllocateToPool") != nullptr);
  int foreign = 0;
  gpumemprof_record_stream_any_device(&foreign, nullptr);  // no device in use: nothing to mark
  CHECK(gpumemprof_last_error()[0] == '\0');
  gpumemprof_empty_cache_all();  // no device in use: nothing to empty
  CHECK(gpumemprof_last_error()[0] == '\0');
}
