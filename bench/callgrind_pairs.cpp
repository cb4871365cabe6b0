// Allocate+free pairs for counting instructions with callgrind, where the wall clock is shared
// (bench/RESULTS.md: "Allocation history", "Allocator core"). Not built by default:
//
//   ninja -C build-rel bench/callgrind_pairs
//   valgrind --tool=callgrind --toggle-collect='run_pairs*' build-rel/bench/callgrind_pairs MODE PAIRS THREADS BYTES
//
// MODE: off | no_stacks | stacks (history recording `all`, C++ stacks depth 16) | tagged (history
// off, each thread inside a memory_category scope) | ledger (tagged, and a CategoryLedger counts the
// allocator's categories). `off` never sets a category. Each of THREADS
// threads does PAIRS pairs of BYTES on its own stream of one simulated allocator, after PAIRS
// uncounted warm-up pairs (the segment exists, the history ring's pages are touched).
// Instructions per pair = callgrind's "Collected" / (PAIRS * THREADS); with history on, they
// include delivering the events to the recorder. It also prints the wall time per pair per
// thread (run it alone, best of several runs: a shared machine varies by 20%).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/memory_category.hpp"

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
  const bool tagged = mode == "tagged" || mode == "ledger";
  if ((mode != "off" && mode != "no_stacks" && mode != "stacks" && !tagged) || pairs <= 0 || threads <= 0 ||
      bytes == 0) {
    std::fprintf(stderr,
                 "usage: callgrind_pairs off|no_stacks|stacks|tagged|ledger PAIRS THREADS BYTES (positive numbers)\n");
    return 2;
  }
  Alloc a{gmp::SimulatedBackend{gmp::SimulatedOptions{.capacity = std::size_t{4} << 30}}, gmp::AllocatorConfig{}};
  std::unique_ptr<gmp::HistoryRecorder> recorder;
  gmp::CategoryLedger ledger;  // destroyed (detached) before the allocator
  if (mode == "ledger") ledger.attach(a);
  if (mode != "off" && !tagged) {
    gmp::HistoryOptions o{.max_entries = 1 << 20, .stack_depth = 16};
    if (mode == "no_stacks") o.stacks = gmp::HistoryStacks::none;
    recorder = std::make_unique<gmp::HistoryRecorder>(o);
    recorder->attach(a);
  }
  std::vector<std::thread> workers;
  std::atomic<std::int64_t> ns{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&a, &ns, pairs, bytes, t, tagged] {
      const gmp::Stream stream(static_cast<std::uintptr_t>(t) + 1);
      std::optional<gmp::MemoryCategoryScope> tag;  // `off` never opens one
      if (tagged) tag.emplace(gmp::category::activation);
      for (long i = 0; i < pairs; ++i) a.deallocate(a.allocate(bytes, stream));  // steady state: segment, ring pages
      const auto start = std::chrono::steady_clock::now();
      run_pairs(a, pairs, stream, bytes);
      ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& w : workers) w.join();
  std::size_t events = 0;
  if (recorder) {
    events = recorder->trace().size();
    recorder->detach();
  }
  std::printf("%ld pairs x %d threads of %zu B, history %s: %.1f ns per pair per thread, %zu events recorded\n", pairs,
              threads, bytes, mode.data(), static_cast<double>(ns.load()) / static_cast<double>(pairs) / threads,
              events);
  return 0;
}
