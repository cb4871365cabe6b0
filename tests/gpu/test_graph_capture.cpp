// CUDA graphs on a real GPU: allocations and frees inside a stream capture (two streams, a
// cross-stream block, the default global capture mode), the graph replayed 100 times with correct
// results, the graph's private pool kept apart from eager memory, and its memory given back once
// the graph is destroyed and its pool released. Run it under compute-sanitizer too
// (bench/gpu_pools.sh does).
#include <cuda_runtime_api.h>

#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpu_kernels.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/mem_pool.hpp"
#include "gpumemprof/device/cuda.hpp"

namespace gmp = gpumemprof;

namespace {
using CudaAllocator = gmp::CachingAllocator<gmp::CudaBackend>;

bool in_pool(const CudaAllocator& a, const void* p, gmp::MempoolId id) {
  const auto x = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& s : a.segments()) {
    if (x >= s.address && x < s.address + s.size) return s.pool_id == id;
  }
  return false;
}
}  // namespace

TEST_CASE("graph capture: allocations and frees inside, two streams, 100 replays", "[gpu][graph]") {
  for (const char* conf : {"", "expandable_segments:True"}) {
    CAPTURE(conf);
    CudaAllocator a(gmp::CudaBackend(0), gmp::AllocatorConfig(conf));
    cudaStream_t s = nullptr;
    cudaStream_t side = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork = nullptr;
    cudaEvent_t join = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    GPUMEMPROF_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    void* raw_errors = nullptr;  // outside the allocator under test
    GPUMEMPROF_CUDA_CHECK(cudaMalloc(&raw_errors, sizeof(unsigned)));
    auto* errors = static_cast<unsigned*>(raw_errors);
    GPUMEMPROF_CUDA_CHECK(cudaMemset(errors, 0, sizeof(unsigned)));

    // Eager warm-up: the default pool caches blocks of the sizes the graph will ask for.
    const std::size_t big = 24 * MiB;
    const std::size_t small = 256 * KiB;
    a.deallocate(a.allocate(big, gmp::Stream(s)));
    a.deallocate(a.allocate(small, gmp::Stream(side)));
    GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());

    const gmp::MempoolId graph_pool = gmp::graph_pool_handle();
    a.create_pool(graph_pool);  // the graph's reference, released when the graph is destroyed
    cudaGraph_t graph = nullptr;
    std::vector<void*> graph_blocks;
    {
      gmp::AllocateToPool route(a, graph_pool,
                                [&](gmp::Stream x) { return x == gmp::Stream(s) || x == gmp::Stream(side); });
      GPUMEMPROF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      void* x = a.allocate(big, gmp::Stream(s));  // new segment of the pool: malloc in relaxed mode
      gpu_test::launch_fill_pattern(x, static_cast<unsigned>(big / 4), 11, 0.0, s);
      GPUMEMPROF_CUDA_CHECK(cudaEventRecord(fork, s));
      GPUMEMPROF_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
      void* y = a.allocate(small, gmp::Stream(side));
      gpu_test::launch_fill_pattern(y, static_cast<unsigned>(small / 4), 22, 0.0, side);
      gpu_test::launch_verify_pattern(x, static_cast<unsigned>(big / 4), 11, 0.0, errors, side);
      a.record_stream(x, gmp::Stream(side));
      gpu_test::launch_verify_pattern(y, static_cast<unsigned>(small / 4), 22, 0.0, errors, side);
      GPUMEMPROF_CUDA_CHECK(cudaEventRecord(join, side));
      GPUMEMPROF_CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
      a.deallocate(y);  // freed inside the capture
      a.deallocate(x);  // used on `side`: its free waits for the capture's end
      void* z = a.allocate(small, gmp::Stream(s));
      gpu_test::launch_fill_pattern(z, static_cast<unsigned>(small / 4), 33, 0.0, s);
      gpu_test::launch_verify_pattern(z, static_cast<unsigned>(small / 4), 33, 0.0, errors, s);
      CHECK(in_pool(a, z, graph_pool));
      graph_blocks.push_back(z);
      a.empty_cache();  // a no-op during capture
      GPUMEMPROF_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    }
    a.validate();
    cudaGraphExec_t exec = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 100; ++i) {
      GPUMEMPROF_CUDA_CHECK(cudaGraphLaunch(exec, s));
      // Eager work between replays: its memory never comes from the graph's pool.
      void* eager = a.allocate(big, gmp::Stream(s));
      CHECK_FALSE(in_pool(a, eager, graph_pool));
      gpu_test::launch_fill_pattern(eager, static_cast<unsigned>(big / 4), 44, 0.0, s);
      a.deallocate(eager);
      if (i % 10 == 0) a.empty_cache();  // leaves the graph's pool alone
    }
    GPUMEMPROF_CUDA_CHECK(cudaStreamSynchronize(s));
    unsigned host_errors = 1;
    GPUMEMPROF_CUDA_CHECK(cudaMemcpy(&host_errors, errors, sizeof host_errors, cudaMemcpyDeviceToHost));
    CHECK(host_errors == 0);
    CHECK(a.pool_stats(graph_pool)->reserved_bytes > 0);
    a.validate();

    // The graph is destroyed: the pool's blocks are freed, the pool released, memory returned.
    GPUMEMPROF_CUDA_CHECK(cudaGraphExecDestroy(exec));
    GPUMEMPROF_CUDA_CHECK(cudaGraphDestroy(graph));
    for (void* p : graph_blocks) a.deallocate(p);
    a.release_pool(graph_pool);
    a.empty_cache();  // also waits for the cross-stream block's event, whose segment then goes back
    CHECK_FALSE(a.pool_stats(graph_pool));
    CHECK(a.memory_stats().reserved_bytes.all().current == 0);
    a.validate();
    GPUMEMPROF_CUDA_CHECK(cudaFree(raw_errors));
    GPUMEMPROF_CUDA_CHECK(cudaEventDestroy(fork));
    GPUMEMPROF_CUDA_CHECK(cudaEventDestroy(join));
    a.release_stream(gmp::Stream(side));
    a.release_stream(gmp::Stream(s));
    GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(side));
    GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(s));
  }
}
