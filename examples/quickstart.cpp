// The README's usage example, built and run as a test so the README stays true.
#include <iostream>

#include <gpumemprof/gpumemprof.hpp>
namespace gmp = gpumemprof;

int main() {
  // The per-device caching allocator ("cuda:0", "sim:0", 0, ...; default = current device).
  auto& alloc = gmp::default_allocator("sim:0");
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all}, "sim:0");

  gmp::GPUMemoryProfiler profiler("sim:0");
  {
    auto scope = profiler.profile_context("forward");  // recorded at scope exit
    void* activations = alloc.allocate(64 << 20);       // bytes, on the default stream
    alloc.deallocate(activations);
  }
  std::cout << profiler.get_summary();                  // calls, times, bytes, peaks
  std::cout << gmp::memory_summary("sim:0");            // torch.cuda.memory_summary's table
  gmp::dump_snapshot("snapshot.pickle", "sim:0");       // open it at pytorch.org/memory_viz
}
