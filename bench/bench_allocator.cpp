// Allocator hot-path benchmarks on the simulated device (host time only; no GPU needed).
// Compare ratios within one run: CPU timings on shared machines are noisy.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "replay.hpp"

namespace gmp = gpumemprof;
using SimAllocator = gmp::CachingAllocator<gmp::SimulatedBackend>;

namespace {
std::string data_path(const std::string& name) {
  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/tests/data/" + name;
}

void BM_FixedPair(benchmark::State& state) {
  SimAllocator a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  const auto size = static_cast<std::size_t>(state.range(0));
  a.deallocate(a.allocate(size));
  for (auto _ : state) {
    void* p = a.allocate(size);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FixedPair)->Arg(512)->Arg(1 << 20)->Arg(64 << 20);

// The cost of memory categories on a 512-byte pair: mode 0 untagged (the allocator's one
// thread-local read, as for every program), 1 inside a memory_category scope (no ledger on this
// allocator), 2 inside a scope with a CategoryLedger attached (one event sink).
void BM_CategoryPair(benchmark::State& state) {
  SimAllocator a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  gmp::CategoryLedger ledger;
  if (state.range(0) == 2) ledger.attach(a);
  a.deallocate(a.allocate(512));
  std::optional<gmp::MemoryCategoryScope> tag;
  if (state.range(0) != 0) tag.emplace(gmp::category::activation);
  for (auto _ : state) {
    void* p = a.allocate(512);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  state.SetItemsProcessed(state.iterations());
  ledger.detach();
}
BENCHMARK(BM_CategoryPair)->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);

// Warm replays of a recorded PyTorch trace; reports ns per allocate+free pair.
void BM_ReplayWarm(benchmark::State& state, const std::string& trace) {
  const auto t = gmp::tools::load_trace(data_path(trace));
  SimAllocator a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  std::vector<void*> live;
  auto once = [&] {
    gmp::tools::replay(t, a, &live);
    for (void* p : live) a.deallocate(p);
  };
  once();  // cold run fills the cache
  for (auto _ : state) once();
  // Seconds per pair, printed with an SI prefix (e.g. "85.3n").
  state.counters["time_per_pair"] = benchmark::Counter(static_cast<double>(state.iterations() * t.allocs),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK_CAPTURE(BM_ReplayWarm, resnet50_train, std::string("resnet50_train.trace.gz"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayWarm, gpt2_train, std::string("gpt2_train.trace.gz"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayWarm, gpt2_generate, std::string("gpt2_generate.trace.gz"))->Unit(benchmark::kMillisecond);

// The replay loop alone, through an allocator that does nothing: the share of BM_ReplayWarm's
// (and gpumemprof replay's) ns per pair that is the harness's own (trace ops, handle table).
struct NullAllocator {
  std::uintptr_t next = 512;
  void* allocate(std::size_t /*bytes*/, gmp::Stream /*stream*/) { return reinterpret_cast<void*>(next += 512); }
  void deallocate(void* p) { benchmark::DoNotOptimize(p); }
  [[nodiscard]] gmp::MemoryStats memory_stats() const { return {}; }
};
void BM_ReplayHarness(benchmark::State& state, const std::string& trace) {
  const auto t = gmp::tools::load_trace(data_path(trace));
  NullAllocator a;
  for (auto _ : state) gmp::tools::replay(t, a);
  state.counters["time_per_pair"] = benchmark::Counter(static_cast<double>(state.iterations() * t.allocs),
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK_CAPTURE(BM_ReplayHarness, resnet50_train, std::string("resnet50_train.trace.gz"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayHarness, gpt2_train, std::string("gpt2_train.trace.gz"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayHarness, gpt2_generate, std::string("gpt2_generate.trace.gz"))
    ->Unit(benchmark::kMillisecond);

// Several threads on one allocator: the cost of the shared lock under contention.
void BM_ThreadedPairs(benchmark::State& state) {
  static SimAllocator* shared = nullptr;
  if (state.thread_index() == 0) shared = new SimAllocator(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  for (auto _ : state) {
    void* p = shared->allocate(4096);
    benchmark::DoNotOptimize(p);
    shared->deallocate(p);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    delete shared;
    shared = nullptr;
  }
}
BENCHMARK(BM_ThreadedPairs)->Threads(1)->Threads(2)->UseRealTime();

// Issue 7's scaling case: 1 MiB + 64 KiB allocate/free pairs (both pools) per iteration, each
// thread on its own stream (Arg 1) or all threads on one stream (Arg 0). "pair_ns_per_thread" is
// the wall time per pair seen by one thread: equal across thread counts means linear scaling.
void BM_StreamPairs(benchmark::State& state) {
  static SimAllocator* shared = nullptr;
  if (state.thread_index() == 0) shared = new SimAllocator(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  const gmp::Stream stream(state.range(0) != 0 ? static_cast<std::uintptr_t>(state.thread_index()) + 1 : 1);
  for (auto _ : state) {
    void* large = shared->allocate(std::size_t{1} << 20, stream);
    void* small = shared->allocate(std::size_t{64} << 10, stream);
    benchmark::DoNotOptimize(large);
    benchmark::DoNotOptimize(small);
    shared->deallocate(small);
    shared->deallocate(large);
  }
  state.SetItemsProcessed(state.iterations() * 2);
  state.counters["pair_ns_per_thread"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 2),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert | benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) {
    delete shared;
    shared = nullptr;
  }
}
BENCHMARK(BM_StreamPairs)->ArgName("own_stream")->Arg(1)->Arg(0)->ThreadRange(1, 16)->UseRealTime();

// The stats fold alone, the one serial part of the hot path (stats_ledger.hpp): ns per record
// folded when `lanes` streams' journals interleave record by record (threads on their own
// streams), 256 records per lane per fold. One thread: the fold's own cost, no contention.
// All threads' pairs together cannot outrun 1 / (2 * this) pairs per second.
void BM_LedgerFold(benchmark::State& state) {
  namespace d = gmp::detail;
  const auto lanes = static_cast<std::size_t>(state.range(0));
  d::StatsLedger ledger(std::size_t{1} << 40, -1);
  std::vector<std::unique_ptr<d::StatsLedger::Lane>> lane;
  for (std::size_t i = 0; i <= lanes; ++i) {  // one more: the default stream's, idle (journaled even for 1)
    lane.push_back(std::make_unique<d::StatsLedger::Lane>());
    ledger.add_lane(*lane.back());
  }
  constexpr int kPerLane = 256;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kPerLane; ++i) {
      for (std::size_t l = 0; l < lanes; ++l) {
        d::StatRecord r;
        r.size = r.requested = std::int64_t{1} << 20;
        r.pool = gmp::StatPool::small_pool;
        r.is_free = i % 2 != 0;
        r.inactive_bytes = r.is_free ? -(std::int64_t{1} << 20) : std::int64_t{1} << 20;
        r.inactive_blocks = r.is_free ? -1 : 1;
        d::LockGuard hold(lane[l]->mutex);
        ledger.reserve(*lane[l]);
        ledger.record(*lane[l], r);
      }
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(
        ledger.read([](const d::StatsLedger::State& s) { return s.stats.allocated_bytes.all().peak; }));
  }
  state.SetItemsProcessed(state.iterations() * kPerLane * static_cast<std::int64_t>(lanes));
  state.counters["ns_per_record"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kPerLane) * static_cast<double>(lanes),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_LedgerFold)->ArgName("lanes")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16);
}  // namespace

BENCHMARK_MAIN();
// The same pairs with every thread on an allocator of its own: what BM_StreamPairs/own_stream:1
// would be if threads on different streams shared no line at all (the scaling ceiling).
void BM_StreamPairsSeparateAllocators(benchmark::State& state) {
  SimAllocator a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  const gmp::Stream stream(static_cast<std::uintptr_t>(state.thread_index()) + 1);
  for (auto _ : state) {
    void* large = a.allocate(std::size_t{1} << 20, stream);
    void* small = a.allocate(std::size_t{64} << 10, stream);
    benchmark::DoNotOptimize(large);
    benchmark::DoNotOptimize(small);
    a.deallocate(small);
    a.deallocate(large);
  }
  state.counters["pair_ns_per_thread"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 2),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert | benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_StreamPairsSeparateAllocators)->ThreadRange(1, 16)->UseRealTime();
