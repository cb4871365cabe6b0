// Snapshot I/O speed: dumping and loading a snapshot with 1,000,000 trace entries whose
// stacks (16 frames) are shared among 1000 distinct stacks -- a long training run recorded
// with record_memory_history(max_entries = 1e6). Goal: the pickle dump well under 1 s.
//
//   bench_snapshot_io --benchmark_min_time=0.05
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "gpumemprof/export/reports/perfetto.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"

namespace gmp = gpumemprof;

namespace {

constexpr std::size_t kEntries = 1'000'000;
constexpr std::size_t kStacks = 1000;
constexpr std::size_t kFramesPerStack = 16;

// A stream that only counts bytes, so the dump is timed without a disk or a copy.
class CountingBuf final : public std::streambuf {
 public:
  std::uint64_t bytes = 0;

 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<std::uint64_t>(n);
    return n;
  }
  int_type overflow(int_type ch) override {
    ++bytes;
    return traits_type::not_eof(ch);
  }
};

const gmp::Snapshot& big_snapshot() {
  static const gmp::Snapshot snap = [] {
    gmp::Snapshot s;
    std::vector<gmp::Frames> stacks;
    for (std::size_t k = 0; k < kStacks; ++k) {
      std::vector<gmp::Frame> frames;
      for (std::size_t f = 0; f < kFramesPerStack; ++f) {
        frames.push_back({"/src/model/layer_" + std::to_string((k + f) % 97) + ".cpp",
                          static_cast<std::int64_t>(10 + (k * 7 + f * 13) % 900),
                          "model::Layer" + std::to_string(f) + "::forward(at::Tensor const&)"});
      }
      stacks.push_back(std::make_shared<const std::vector<gmp::Frame>>(std::move(frames)));
    }
    // 64 segments of 20 MiB, each tiled by an allocated and a free block.
    const std::uint64_t base = 0x7f0000000000ULL;
    for (std::uint64_t i = 0; i < 64; ++i) {
      gmp::SnapshotSegment seg;
      seg.address = base + i * (32ULL << 20);
      seg.total_size = 20ULL << 20;
      seg.allocated_size = seg.active_size = 4ULL << 20;
      seg.requested_size = (4ULL << 20) - 100;
      seg.frames = stacks[i % kStacks];
      seg.blocks.push_back(
          {seg.address, 4ULL << 20, (4ULL << 20) - 100, gmp::BlockState::active_allocated, stacks[(i * 3) % kStacks]});
      seg.blocks.push_back({seg.address + (4ULL << 20), 16ULL << 20, 0, gmp::BlockState::inactive, nullptr});
      s.segments.push_back(std::move(seg));
    }
    // alloc, free_requested, free_completed cycles over a working set of addresses.
    std::vector<gmp::TraceEntry> trace;
    trace.reserve(kEntries);
    std::int64_t t = 1'795'303'894'267'574;
    for (std::size_t i = 0; i < kEntries; ++i) {
      gmp::TraceEntry e;
      const std::size_t op = i % 3;
      const std::size_t obj = i / 3;
      e.action = op == 0   ? gmp::TraceAction::alloc
                 : op == 1 ? gmp::TraceAction::free_requested
                           : gmp::TraceAction::free_completed;
      e.addr = base + (obj % 4096) * 4096;
      e.size = 512 * (1 + obj % 2000);
      e.time_us = t;
      t += static_cast<std::int64_t>(1 + i % 5);
      e.frames = stacks[obj % kStacks];
      trace.push_back(std::move(e));
    }
    s.device_traces.push_back(std::move(trace));
    s.allocator_settings = {{"PYTORCH_CUDA_ALLOC_CONF", std::string()},
                            {"max_split_size", std::int64_t{-1}},
                            {"garbage_collection_threshold", 0.0},
                            {"expandable_segments", false}};
    for (int k = 0; k < 100; ++k) s.external_annotations.push_back({"train_step", k % 2 == 0, 0, t - 1000 + k});
    return s;
  }();
  return snap;
}

void dump(benchmark::State& state, gmp::SnapshotFormat format) {
  const gmp::Snapshot& snap = big_snapshot();
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    CountingBuf sink;
    std::ostream os(&sink);
    gmp::write_snapshot(snap, os, format);
    bytes = sink.bytes;
  }
  state.counters["file_MB"] = static_cast<double>(bytes) / 1e6;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEntries));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void BM_DumpPickle(benchmark::State& state) { dump(state, gmp::SnapshotFormat::pickle); }
void BM_DumpJson(benchmark::State& state) { dump(state, gmp::SnapshotFormat::json); }

// The whole file path: temporary file, write, fsync, rename.
void BM_DumpPickleFile(benchmark::State& state) {
  const gmp::Snapshot& snap = big_snapshot();
  const std::string path = "/tmp/gpumemprof_bench_snapshot.pickle";
  for (auto _ : state) gmp::write_snapshot_file(snap, path);
  std::remove(path.c_str());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEntries));
}

void BM_LoadPickle(benchmark::State& state) {
  std::ostringstream os;
  gmp::write_snapshot(big_snapshot(), os);
  const std::string bytes = os.str();
  for (auto _ : state) {
    gmp::Snapshot s = gmp::parse_snapshot(bytes, "bench");
    benchmark::DoNotOptimize(s.device_traces.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEntries));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes.size()));
}

void BM_PerfettoJson(benchmark::State& state) {
  const gmp::Snapshot& snap = big_snapshot();
  for (auto _ : state) {
    CountingBuf sink;
    std::ostream os(&sink);
    gmp::write_perfetto(snap, os);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEntries));
}

}  // namespace

BENCHMARK(BM_DumpPickle)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DumpPickleFile)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DumpJson)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadPickle)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PerfettoJson)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
