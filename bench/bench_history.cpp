// What recording history costs: allocate+free pairs on a simulated device with history off,
// on without stacks, and on with C++ stacks (depth 16) taken ten frames below the test; the
// stack walkers alone; and building the snapshot of a million events.
//
//   bench_history --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Goals (issue 3): <= +20 ns per event without stacks, <= +1 us per event with stacks; a
// pair is 3 events (alloc, free_requested, free_completed). Snapshot of 1M events built and
// written <= 1 s.
#include <benchmark/benchmark.h>
#include <execinfo.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/history/stacks.hpp"

namespace gmp = gpumemprof;
using Alloc = gmp::CachingAllocator<gmp::SimulatedBackend>;

namespace {

volatile int sink = 0;

// A realistic call depth: N frames of user code between the benchmark and the allocator.
template <int N>
struct Deep {
  GPUMEMPROF_NOINLINE static void* allocate(Alloc& a, std::size_t n) {
    void* p = Deep<N - 1>::allocate(a, n);
    sink = sink + 1;  // keeps the frame (no tail call)
    return p;
  }
  GPUMEMPROF_NOINLINE static void deallocate(Alloc& a, void* p) {
    Deep<N - 1>::deallocate(a, p);
    sink = sink + 1;
  }
};
template <>
struct Deep<0> {
  GPUMEMPROF_NOINLINE static void* allocate(Alloc& a, std::size_t n) { return a.allocate(n); }
  GPUMEMPROF_NOINLINE static void deallocate(Alloc& a, void* p) { a.deallocate(p); }
};

enum Mode : int { off, all_no_stacks, state_stacks, alloc_stacks, all_stacks };

void BM_pair(benchmark::State& state) {
  const auto mode = static_cast<Mode>(state.range(0));
  Alloc a{gmp::SimulatedBackend{}, gmp::AllocatorConfig{}};
  std::unique_ptr<gmp::HistoryRecorder> rec;
  gmp::HistoryOptions o{.max_entries = 1 << 20, .stack_depth = 16};
  switch (mode) {
    case off: o.enabled = gmp::HistoryEnabled::off; break;
    case all_no_stacks: o.stacks = gmp::HistoryStacks::none; break;
    case state_stacks:
      o.enabled = gmp::HistoryEnabled::state;
      o.context = gmp::HistoryContext::state;
      break;
    case alloc_stacks: o.context = gmp::HistoryContext::alloc; break;
    case all_stacks: break;
  }
  if (mode != off) {
    rec = std::make_unique<gmp::HistoryRecorder>(o);
    rec->attach(a);
  }
  void* warm = Deep<10>::allocate(a, 4096);  // the segment exists: steady state
  Deep<10>::deallocate(a, warm);
  for (auto _ : state) {
    void* p = Deep<10>::allocate(a, 4096);
    benchmark::DoNotOptimize(p);
    Deep<10>::deallocate(a, p);
  }
  state.counters["events"] =
      benchmark::Counter(3.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  if (rec) rec->detach();
}
BENCHMARK(BM_pair)->ArgName("off")->Arg(off);
BENCHMARK(BM_pair)->ArgName("all_no_stacks")->Arg(all_no_stacks);
BENCHMARK(BM_pair)->ArgName("state_stacks16")->Arg(state_stacks);
BENCHMARK(BM_pair)->ArgName("alloc_stacks16")->Arg(alloc_stacks);
BENCHMARK(BM_pair)->ArgName("all_stacks16")->Arg(all_stacks);

// Threads on streams of their own, one allocator, history recording (no stacks / C++ stacks,
// depth 16): what the recorder's share of the allocator's locks costs as threads are added.
// Reports ns per pair per thread (3 events a pair).
void BM_stream_pairs(benchmark::State& state) {
  static Alloc* shared = nullptr;
  static gmp::HistoryRecorder* rec = nullptr;
  if (state.thread_index() == 0) {
    shared = new Alloc(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
    gmp::HistoryOptions o{.max_entries = 1 << 20, .stack_depth = 16};
    if (state.range(0) == all_no_stacks) o.stacks = gmp::HistoryStacks::none;
    rec = new gmp::HistoryRecorder(o);
    rec->attach(*shared);
  }
  const gmp::Stream stream(static_cast<std::uintptr_t>(state.thread_index()) + 1);
  for (auto _ : state) {
    void* q = shared->allocate(4096, stream);
    benchmark::DoNotOptimize(q);
    shared->deallocate(q);
  }
  state.counters["pair_ns_per_thread"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert | benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) {
    delete rec;
    delete shared;
    rec = nullptr;
    shared = nullptr;
  }
}
BENCHMARK(BM_stream_pairs)->ArgName("all_no_stacks")->Arg(all_no_stacks)->Threads(1)->Threads(8)->UseRealTime();
BENCHMARK(BM_stream_pairs)->ArgName("all_stacks16")->Arg(all_stacks)->Threads(1)->Threads(8)->UseRealTime();

// The stack walkers alone, 24 frames (16 + the allocator's own), 20 frames below.
enum Walker : int { cached, libgcc, glibc_backtrace };
template <int N>
GPUMEMPROF_NOINLINE std::size_t walk_at(Walker w, std::uintptr_t* out) {
  if constexpr (N > 0) {
    const std::size_t n = walk_at<N - 1>(w, out);
    sink = sink + 1;
    return n;
  } else {
    switch (w) {
      case cached: return gmp::capture_stack(out, 24);
      case libgcc: return gmp::detail::unwind_slow(out, 24);
      case glibc_backtrace: return static_cast<std::size_t>(::backtrace(reinterpret_cast<void**>(out), 24));
    }
    return 0;
  }
}
void BM_capture_stack(benchmark::State& state) {
  const auto w = static_cast<Walker>(state.range(0));
  std::uintptr_t frames[32];
  for (auto _ : state) benchmark::DoNotOptimize(walk_at<20>(w, frames));
}
BENCHMARK(BM_capture_stack)->ArgName("cached")->Arg(cached);
BENCHMARK(BM_capture_stack)->ArgName("libgcc_unwind_backtrace")->Arg(libgcc);
BENCHMARK(BM_capture_stack)->ArgName("glibc_backtrace")->Arg(glibc_backtrace);

// A million recorded events (alloc/free pairs from 8 call sites, stacks on), then snapshots.
struct Million {
  Million() : a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{}), rec({.max_entries = 1'000'000}) {
    rec.attach(a);
    std::vector<void*> live;
    for (std::size_t i = 0; i < 400'000; ++i) {  // ~1.2M events: the 1M ring is full
      const std::size_t n = 512 + (i * 7919) % (4 << 20);
      void* p = nullptr;
      switch (i % 4) {
        case 0: p = Deep<2>::allocate(a, n); break;
        case 1: p = Deep<5>::allocate(a, n); break;
        case 2: p = Deep<8>::allocate(a, n); break;
        default: p = Deep<11>::allocate(a, n); break;
      }
      if (i % 50 == 0) {
        live.push_back(p);  // some stay live: segments with many blocks
      } else {
        (i % 2 == 0 ? Deep<3>::deallocate(a, p) : Deep<6>::deallocate(a, p));
      }
    }
  }
  Alloc a;
  gmp::HistoryRecorder rec;
};
Million& million() {
  static Million m;
  return m;
}

void BM_snapshot_1M_events(benchmark::State& state) {
  Million& m = million();
  std::size_t entries = 0;
  for (auto _ : state) {
    const gmp::Snapshot s = gmp::snapshot(m.a);
    entries = s.device_traces.at(0).size();
    benchmark::DoNotOptimize(s.segments.data());
  }
  state.counters["entries"] = static_cast<double>(entries);
}
BENCHMARK(BM_snapshot_1M_events)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_snapshot_1M_events_built_and_written(benchmark::State& state) {
  Million& m = million();
  const auto path = (std::filesystem::temp_directory_path() / "gpumemprof-bench-history.pickle").string();
  for (auto _ : state) gmp::write_snapshot_file(gmp::snapshot(m.a), path);
  state.counters["bytes"] = static_cast<double>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
}
BENCHMARK(BM_snapshot_1M_events_built_and_written)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
