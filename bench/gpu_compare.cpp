// One process, every contender, the same request streams: gpumemprof's caching allocator on a
// real GPU against PyTorch's c10 CUDACachingAllocator (when built with libtorch),
// cudaMallocAsync (stream-ordered pool) and plain cudaMalloc/cudaFree.
//
// Streams: fixed-size alloc+free pairs (512 B, 1 MiB, 64 MiB), a random log-uniform stream, and the
// recorded PyTorch traces given on the command line. Each trace is replayed cold once (peak
// reserved bytes) and then warm `repeat` times on the same allocator (best ns per pair), as in
// ../shared/traces/anchor_bench_h200.txt.
//
// Contenders: gpumemprof with the default policy and with expandable_segments:True, c10 (with
// whatever PYTORCH_CUDA_ALLOC_CONF says: c10 reads it once per process, so run_gpu.sh runs
// `--c10-only` a second time with expandable_segments:True), cudaMallocAsync, cudaMalloc.
//
//   gpu_compare [--repeat N] [--c10-only] TRACE...
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "trace.hpp"

#if GPUMEMPROF_HAVE_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace gmp = gpumemprof;
using Clock = std::chrono::steady_clock;

namespace {

struct Gpumemprof {
  explicit Gpumemprof(const char* conf = "", const char* label = "gpumemprof")
      : name(label), a(backend(), gmp::AllocatorConfig(conf)) {}
  static gmp::AnyBackend backend() { return gmp::AnyBackend::for_device(gmp::Device("cuda:0")); }
  const char* name;
  gmp::DeviceAllocator a;
  void* alloc(std::size_t n) { return a.allocate(n); }
  void free(void* p) { a.deallocate(p); }
  void reset() {
    a.empty_cache();
    a.reset_peak_memory_stats();
  }
  double peak_reserved_mib() { return static_cast<double>(a.memory_stats().reserved_bytes.all().peak) / 1048576.0; }
};

#if GPUMEMPROF_HAVE_TORCH
struct PytorchC10 {
  const char* name = "pytorch_c10";
  PytorchC10() { c10::cuda::CUDACachingAllocator::init(1); }
  void* alloc(std::size_t n) { return c10::cuda::CUDACachingAllocator::raw_alloc(n); }
  void free(void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
  void reset() {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  }
  double peak_reserved_mib() {
    return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak) / 1048576.0;
  }
};
#endif

struct MallocAsync {
  const char* name = "cudaMallocAsync";
  cudaMemPool_t pool{};
  MallocAsync() {
    GPUMEMPROF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t keep = UINT64_MAX;  // cache freed memory, as PyTorch's async backend does
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  void* alloc(std::size_t n) {
    void* p = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaMallocAsync(&p, n, nullptr));
    return p;
  }
  void free(void* p) { GPUMEMPROF_CUDA_CHECK(cudaFreeAsync(p, nullptr)); }
  void reset() {
    GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    std::uint64_t zero = 0;
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  }
  double peak_reserved_mib() {
    std::uint64_t high = 0;
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high));
    return static_cast<double>(high) / 1048576.0;
  }
};

struct PlainMalloc {
  const char* name = "cudaMalloc";
  void* alloc(std::size_t n) {
    void* p = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaMalloc(&p, n));
    return p;
  }
  void free(void* p) { GPUMEMPROF_CUDA_CHECK(cudaFree(p)); }
  void reset() {}
  double peak_reserved_mib() { return 0; }
};

template <class A>
double fixed_pairs(A& a, std::size_t size, int pairs) {
  for (int i = 0; i < 100; ++i) a.free(a.alloc(size));  // warm
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < pairs; ++i) a.free(a.alloc(size));
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / pairs;
    best = std::min(best, ns);
  }
  return best;
}

template <class A>
double replay_once(A& a, const gmp::tools::Trace& t) {
  std::vector<void*> ptrs(t.id_count, nullptr);
  const auto t0 = Clock::now();
  for (const auto& op : t.ops) {
    if (op.is_alloc) {
      ptrs[op.id] = a.alloc(op.bytes);
    } else {
      a.free(ptrs[op.id]);
      ptrs[op.id] = nullptr;
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(t.allocs);
  for (void* p : ptrs) {
    if (p != nullptr) a.free(p);
  }
  return ns;
}

template <class A>
void run_trace(A& a, const gmp::tools::Trace& t, const std::string& label, int repeat) {
  a.reset();
  replay_once(a, t);  // cold: the peak
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  const double peak = a.peak_reserved_mib();
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) best = std::min(best, replay_once(a, t));
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("%-22s %-16s allocs=%8zu  ns/pair=%9.1f  peak_reserved_MiB=%9.1f\n", label.c_str(), a.name, t.allocs,
              best, peak);
  std::fflush(stdout);
}

gmp::tools::Trace random_log_uniform(std::size_t allocs, unsigned seed) {
  // Sizes log-uniform in [1 B, 64 MiB); up to 512 live blocks; frees in random order.
  std::mt19937_64 rng(seed);
  std::string text;
  std::vector<std::uint32_t> live;
  std::uint32_t next = 0;
  while (next < allocs) {
    if (live.size() < 512 && (live.empty() || rng() % 2 == 0)) {
      const double lg = std::uniform_real_distribution<double>(0.0, 26.0)(rng);
      const auto bytes = static_cast<std::uint64_t>(std::exp2(lg));
      text += "a " + std::to_string(next) + " " + std::to_string(std::max<std::uint64_t>(bytes, 1)) + " 0\n";
      live.push_back(next++);
    } else {
      const std::size_t k = rng() % live.size();
      text += "f " + std::to_string(live[k]) + "\n";
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (auto id : live) text += "f " + std::to_string(id) + "\n";
  return gmp::tools::parse_trace(text, "random_log_uniform");
}

template <class A>
void run_all(A& a, const std::vector<gmp::tools::Trace>& traces, int repeat, bool slow) {
  for (std::size_t size : {std::size_t{512}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    a.reset();
    const int pairs = slow ? 200 : 200000;  // cudaMalloc+cudaFree take ~100 us
    std::printf("%-22s %-16s size=%9zu  ns/pair=%9.1f\n", "fixed", a.name, size, fixed_pairs(a, size, pairs));
    std::fflush(stdout);
  }
  if (slow) return;
  for (const auto& t : traces) run_trace(a, t, t.path.substr(t.path.find_last_of('/') + 1), repeat);
}

}  // namespace

int main(int argc, char** argv) {
  if (gmp::cuda_device_count() == 0) {
    std::printf("no CUDA device: %s\n", gmp::cuda_unavailable_reason().c_str());
    return 77;
  }
  int repeat = 3;
  bool c10_only = false;
  std::vector<gmp::tools::Trace> traces;
  traces.push_back(random_log_uniform(100000, 1));
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (std::string(argv[i]) == "--c10-only") {
      c10_only = true;
    } else {
      traces.push_back(gmp::tools::load_trace(argv[i]));
    }
  }
  cudaDeviceProp prop{};
  GPUMEMPROF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; warm replays: best of %d\n", prop.name, repeat);
  GPUMEMPROF_CUDA_CHECK(cudaFree(nullptr));  // create the context before timing anything
  if (!c10_only) {
    Gpumemprof g;
    run_all(g, traces, repeat, false);
  }
  if (!c10_only) {
    Gpumemprof g("expandable_segments:True", "gmp_expandable");
    run_all(g, traces, repeat, false);
  }
#if GPUMEMPROF_HAVE_TORCH
  {
    PytorchC10 c;
    run_all(c, traces, repeat, false);
    c.reset();
  }
#else
  std::printf("(built without libtorch: no pytorch_c10 contender)\n");
#endif
  if (c10_only) return 0;
  {
    MallocAsync m;
    run_all(m, traces, repeat, false);
  }
  {
    PlainMalloc p;
    run_all(p, traces, repeat, true);
  }
  return 0;
}
