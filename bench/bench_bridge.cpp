// What one allocate+free pair costs on the CPU through the PyTorch bridge, against the allocator
// called directly (bench/RESULTS.md "step time", docs/bridge-step-time.md). Built from the bridge's
// own sources (python/gpumemprof_torch.cpp), so its exported C functions run as PyTorch calls them;
// before the first call, the bridge's CUDA devices 0 (default policy) and 1 (expandable segments)
// are given allocators over simulated devices, so no GPU is needed. Contenders, per pair:
//
//   direct     DeviceAllocator::allocate / deallocate (what the C++ benchmarks measure)
//   bridge     gpumemprof_malloc / gpumemprof_free, errors raising as under install()
//   pluggable  bridge, wrapped as torch 2.11's CUDAPluggableAllocator wraps every call: the two
//              entry points held in std::function, and a std::unordered_map from pointer to
//              (size, device, stream) behind one std::mutex (emplace after malloc; find, read
//              and erase before free). A model written from reading torch/csrc/cuda/
//              CUDAPluggableAllocator.cpp, to size the share of the pair that PyTorch adds.
//
// BM_DeviceCheck (GPU hosts only): what each call paid before the bridge kept its allocators by
// device index. Patterns: "pair" allocates and frees one 4 KiB block; "window" keeps 32 blocks of mixed sizes
// (512 B .. 6 MiB, both pools) alive and replaces the oldest each iteration, as a step's
// activations come and go. Threads share the default stream (as PyTorch's forward on the main
// thread and backward on autograd's thread do). Run alone, best of several runs:
//   ninja -C build bench/bench_bridge && build/bench/bench_bridge --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof_torch.h"
#include "replay.hpp"

namespace gmp = gpumemprof;

namespace {

constexpr int kDefaultDevice = 0;     // the bridge's cuda:0, default policy
constexpr int kExpandableDevice = 1;  // its cuda:1, expandable_segments:True

// Puts simulated allocators where the bridge looks for cuda:0 and cuda:1 (once, before any call).
bool give_bridge_simulated_devices() {
  static const bool done = [] {
    const auto put = [](int index, const char* conf) {
      gmp::SimulatedOptions opt;
      opt.capacity = std::size_t{16} << 30;
      opt.index = index;
      auto& slot = gmp::detail::default_allocator_slots().cuda[static_cast<std::size_t>(index)];
      slot.allocator.store(
          new gmp::DeviceAllocator(gmp::AnyBackend(gmp::SimulatedBackend(opt)), gmp::AllocatorConfig::parse(conf)),
          std::memory_order_release);
    };
    put(kDefaultDevice, "");
    put(kExpandableDevice, "expandable_segments:True");
    gpumemprof_raise_on_error(1);  // as install() sets
    return true;
  }();
  return done;
}

gmp::DeviceAllocator& direct(int device) {
  give_bridge_simulated_devices();
  return *gmp::detail::default_allocator_slots().cuda[static_cast<std::size_t>(device)].allocator.load(
      std::memory_order_acquire);
}

// torch 2.11's per-call wrapping of a pluggable allocator, as a model (see the file's comment).
struct PluggableModel {
  struct Meta {
    std::size_t size;
    int device;
    cudaStream_t stream;
  };
  std::function<void*(std::size_t, int, cudaStream_t)> alloc_fn = [](std::size_t n, int d, cudaStream_t s) {
    return gpumemprof_malloc(static_cast<ssize_t>(n), d, s);
  };
  std::function<void(void*, std::size_t, int, cudaStream_t)> free_fn =
      [](void* p, std::size_t n, int d, cudaStream_t s) { gpumemprof_free(p, static_cast<ssize_t>(n), d, s); };
  std::mutex mutex;
  std::unordered_map<void*, Meta> meta;

  void* allocate(std::size_t n, int device, cudaStream_t stream) {
    void* p = alloc_fn(n, device, stream);
    std::lock_guard lock(mutex);
    meta.emplace(p, Meta{n, device, stream});
    return p;
  }
  void deallocate(void* p) {
    Meta m{};
    {
      std::lock_guard lock(mutex);
      auto it = meta.find(p);
      if (it == meta.end()) {
        std::fprintf(stderr, "bench_bridge: %p was not allocated through the model\n", p);
        std::abort();
      }
      m = it->second;
      meta.erase(it);
    }
    free_fn(p, m.size, m.device, m.stream);
  }
};

PluggableModel& pluggable() {
  static auto* model = new PluggableModel();
  return *model;
}

enum class Via { direct, bridge, pluggable };

void* allocate(Via via, int device, std::size_t n, gmp::Stream stream = gmp::Stream()) {
  switch (via) {
    case Via::direct: return direct(device).allocate(n, stream);
    case Via::bridge: return gpumemprof_malloc(static_cast<ssize_t>(n), device, stream.as<CUstream_st>());
    case Via::pluggable: return pluggable().allocate(n, device, stream.as<CUstream_st>());
  }
  return nullptr;
}

void deallocate(Via via, int device, void* p, std::size_t n) {
  switch (via) {
    case Via::direct: direct(device).deallocate(p); break;
    case Via::bridge: gpumemprof_free(p, static_cast<ssize_t>(n), device, nullptr); break;
    case Via::pluggable: pluggable().deallocate(p); break;
  }
}

// One 4 KiB block allocated and freed.
void BM_Pair(benchmark::State& state, Via via) {
  give_bridge_simulated_devices();
  const int device = static_cast<int>(state.range(0));
  constexpr std::size_t kBytes = 4096;
  for (auto _ : state) {
    void* p = allocate(via, device, kBytes);
    benchmark::DoNotOptimize(p);
    deallocate(via, device, p, kBytes);
  }
  state.counters["ns_per_pair"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert | benchmark::Counter::kAvgThreads);
}

// 32 live blocks of mixed sizes; each iteration frees the oldest and allocates the next size.
void BM_Window(benchmark::State& state, Via via) {
  give_bridge_simulated_devices();
  const int device = static_cast<int>(state.range(0));
  static constexpr std::array<std::size_t, 12> kSizes = {512,     4096,  65536,   786432, 2 << 20, 1536,
                                                         3 << 20, 98304, 6 << 20, 8192,   1 << 20, 262144};
  constexpr std::size_t kLive = 32;
  std::array<void*, kLive> live{};
  std::array<std::size_t, kLive> sizes{};
  std::size_t next = static_cast<std::size_t>(state.thread_index()) * 5;  // threads interleave sizes
  for (std::size_t i = 0; i < kLive; ++i) {
    sizes[i] = kSizes[next++ % kSizes.size()];
    live[i] = allocate(via, device, sizes[i]);
  }
  std::size_t oldest = 0;
  for (auto _ : state) {
    deallocate(via, device, live[oldest], sizes[oldest]);
    sizes[oldest] = kSizes[next++ % kSizes.size()];
    live[oldest] = allocate(via, device, sizes[oldest]);
    benchmark::DoNotOptimize(live[oldest]);
    oldest = (oldest + 1) % kLive;
  }
  for (std::size_t i = 0; i < kLive; ++i) deallocate(via, device, live[i], sizes[i]);
  state.counters["ns_per_pair"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert | benchmark::Counter::kAvgThreads);
}

void policies_and_threads(benchmark::internal::Benchmark* b) {
  b->ArgName("expandable")
      ->Arg(kDefaultDevice)
      ->Arg(kExpandableDevice)
      ->Threads(1)
      ->Threads(2)
      ->Threads(4)
      ->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Pair, direct, Via::direct)->Apply(policies_and_threads);
BENCHMARK_CAPTURE(BM_Pair, bridge, Via::bridge)->Apply(policies_and_threads);
BENCHMARK_CAPTURE(BM_Pair, pluggable, Via::pluggable)->Apply(policies_and_threads);
BENCHMARK_CAPTURE(BM_Window, direct, Via::direct)->Apply(policies_and_threads);
BENCHMARK_CAPTURE(BM_Window, bridge, Via::bridge)->Apply(policies_and_threads);
BENCHMARK_CAPTURE(BM_Window, pluggable, Via::pluggable)->Apply(policies_and_threads);

// What each gpumemprof_malloc and gpumemprof_free paid before the bridge kept its allocators by
// index: Device::cuda(0), which asks the CUDA runtime for the device count and spells "cuda:0".
// Needs a GPU (without one the runtime call fails and the check throws).
void BM_DeviceCheck(benchmark::State& state) {
  if (gmp::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(gmp::Device::cuda(0));
}
BENCHMARK(BM_DeviceCheck);

// The measured loop of a callgrind count (--count): `pairs` window pairs through `via`.
[[gnu::noinline]] void count_pairs(Via via, int device, long pairs) {
  static constexpr std::array<std::size_t, 6> kSizes = {512, 4096, 786432, 3 << 20, 98304, 6 << 20};
  std::array<void*, 8> live{};
  std::array<std::size_t, 8> sizes{};
  for (std::size_t i = 0; i < live.size(); ++i) live[i] = allocate(via, device, sizes[i] = kSizes[i % kSizes.size()]);
  for (long i = 0; i < pairs; ++i) {
    const std::size_t k = static_cast<std::size_t>(i) % live.size();
    deallocate(via, device, live[k], sizes[k]);
    live[k] = allocate(via, device, sizes[k] = kSizes[static_cast<std::size_t>(i + 3) % kSizes.size()]);
  }
  for (std::size_t i = 0; i < live.size(); ++i) deallocate(via, device, live[i], sizes[i]);
}

// A recorded PyTorch trace (tests/data/*.trace.gz) through `via`, for tools/replay.hpp.
struct ReplayThrough {
  Via via;
  int device;
  void* allocate(std::size_t bytes, gmp::Stream stream) { return ::allocate(via, device, bytes, stream); }
  void deallocate(void* p) { ::deallocate(via, device, p, 0); }
  [[nodiscard]] gmp::MemoryStats memory_stats() const { return direct(device).memory_stats(); }
};

// The measured loop of a callgrind count (--replay): `rounds` warm replays of the trace.
[[gnu::noinline]] void replay_rounds(const gmp::tools::Trace& t, ReplayThrough& through, int rounds) {
  std::vector<void*> live;
  for (int i = 0; i < rounds; ++i) {
    live.clear();
    gmp::tools::replay(t, through, &live);
    for (void* p : live) through.deallocate(p);
  }
}

}  // namespace

// bench_bridge [benchmark flags]: the timed benchmarks. bench_bridge --replay: see below.
// bench_bridge --count direct|bridge|pluggable DEVICE PAIRS: instructions per pair under
//   valgrind --tool=callgrind --toggle-collect='*count_pairs*' build/bench/bench_bridge --count ...
// (the shared 2-core VM's clock varies by tens of percent; instruction counts do not).
int main(int argc, char** argv) {
  if (argc == 5 && std::string_view(argv[1]) == "--count") {
    const std::string_view via = argv[2];
    const Via v = via == "direct" ? Via::direct : via == "bridge" ? Via::bridge : Via::pluggable;
    give_bridge_simulated_devices();
    count_pairs(v, std::atoi(argv[3]), 1000);  // warm: segments exist, maps and trees are sized
    count_pairs(v, std::atoi(argv[3]), std::atol(argv[4]));
    return 0;
  }
  if (argc == 6 && std::string_view(argv[1]) == "--replay") {
    // bench_bridge --replay TRACE direct|bridge|pluggable DEVICE ROUNDS: a cold replay, then ROUNDS
    // warm ones in replay_rounds (collect there: --toggle-collect='*replay_rounds*'); prints the
    // wall time per allocate+free pair of the warm ones.
    const std::string_view via = argv[3];
    ReplayThrough through{via == "direct"   ? Via::direct
                          : via == "bridge" ? Via::bridge
                                            : Via::pluggable,
                          std::atoi(argv[4])};
    give_bridge_simulated_devices();
    const gmp::tools::Trace t = gmp::tools::load_trace(argv[2]);
    replay_rounds(t, through, 1);
    const auto start = std::chrono::steady_clock::now();
    const int rounds = std::atoi(argv[5]);
    replay_rounds(t, through, rounds);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s %s device %s: %.1f ns per pair over %d warm replays of %zu allocations\n", argv[2], argv[3],
                argv[4], ns / static_cast<double>(t.allocs) / rounds, rounds, t.allocs);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
