// Allocate+free pairs for counting instructions with callgrind, where the wall clock is shared
// (bench/RESULTS.md: "Allocation history", "Allocator core"). Not built by default:
//
//   ninja -C build-rel bench/callgrind_pairs
//   valgrind --tool=callgrind --toggle-collect='run_pairs*' build-rel/bench/callgrind_pairs MODE PAIRS THREADS BYTES
//
// MODE: off | no_stacks | stacks (history recording `all`, C++ stacks depth 16). Each of THREADS
// threads does PAIRS pairs of BYTES on its own stream of one simulated allocator, after one warm
// pair; instructions per pair = callgrind's "Collected" / (PAIRS * THREADS). With history on, the
// count includes delivering the events to the recorder and a final trace() outside run_pairs.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/history/history_recorder.hpp"

namespace gmp = gpumemprof;
using Alloc = gmp::CachingAllocator<gmp::SimulatedBackend>;

// The measured loop: callgrind collects inside this function only.
GPUMEMPROF_NOINLINE void run_pairs(Alloc& a, long pairs, gmp::Stream stream, std::size_t bytes) {
  for (long i = 0; i < pairs; ++i) {
    void* p = a.allocate(bytes, stream);
    asm volatile("" : : "r"(p) : "memory");
    a.deallocate(p);
  }
}

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "off";
  const long pairs = argc > 2 ? std::atol(argv[2]) : 100000;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::size_t bytes = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 512;
  if ((mode != "off" && mode != "no_stacks" && mode != "stacks") || pairs <= 0 || threads <= 0 || bytes == 0) {
    std::fprintf(stderr, "usage: callgrind_pairs off|no_stacks|stacks PAIRS THREADS BYTES (positive numbers)\n");
    return 2;
  }
  Alloc a{gmp::SimulatedBackend{gmp::SimulatedOptions{.capacity = std::size_t{4} << 30}}, gmp::AllocatorConfig{}};
  std::unique_ptr<gmp::HistoryRecorder> recorder;
  if (mode != "off") {
    gmp::HistoryOptions o{.max_entries = 1 << 20, .stack_depth = 16};
    if (mode == "no_stacks") o.stacks = gmp::HistoryStacks::none;
    recorder = std::make_unique<gmp::HistoryRecorder>(o);
    recorder->attach(a);
  }
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&a, pairs, bytes, t] {
      const gmp::Stream stream(static_cast<std::uintptr_t>(t) + 1);
      a.deallocate(a.allocate(bytes, stream));  // the segment exists: steady state
      run_pairs(a, pairs, stream, bytes);
    });
  }
  for (auto& w : workers) w.join();
  std::size_t events = 0;
  if (recorder) {
    events = recorder->trace().size();
    recorder->detach();
  }
  std::printf("%ld pairs x %d threads of %zu B, history %s: %zu events recorded\n", pairs, threads, bytes,
              mode.data(), events);
  return 0;
}
