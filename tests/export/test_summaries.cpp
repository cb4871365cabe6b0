// memory_summary (torch.cuda.memory_summary's table) and the snapshot summary.
#include <cstdlib>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/export/reports/memory_summary.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"

namespace gmp = gpumemprof;
using Catch::Matchers::Contains;

TEST_CASE("memory_summary has PyTorch's frame, rows and unit rules") {
  gmp::CachingAllocator<gmp::SimulatedBackend> a(gmp::SimulatedBackend{}, gmp::AllocatorConfig{});
  void* p = a.allocate(3 << 20);
  void* q = a.allocate(600);
  const std::string t = gmp::memory_summary(a.memory_stats(), "sim:0");
  std::istringstream in(t);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    INFO(line);
    CHECK(line.size() == 77);  // "|" + 75 + "|"
    CHECK(line.front() == '|');
    CHECK(line.back() == '|');
  }
  CHECK(lines == 6 + 9 * 4 + 2 * 2 + 1);
  CHECK_THAT(t, Contains("|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |"));
  // 3 MiB + 1024 B: a unit step needs 768 of the next unit, so this stays in KiB (rounded down).
  CHECK_THAT(t, Contains("| Allocated memory      |   3073 KiB |   3073 KiB |   3073 KiB |      0 B   |"));
  // Per-pool rows use the "all" row's unit: the small pool's 1024 B shows as 1 KiB.
  CHECK_THAT(t, Contains("|       from small pool |      1 KiB |      1 KiB |      1 KiB |      0 B   |"));
  CHECK_THAT(t, Contains("| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |"));
  CHECK_THAT(t, Contains("| Allocations           |       2    |       2    |       2    |       0    |"));
  CHECK_THAT(t, Contains("CUDA OOMs: 0            |        cudaMalloc retries: 0       "));
  const std::string abbreviated = gmp::memory_summary(a.memory_stats(), "sim:0", true);
  CHECK(abbreviated.find("from large pool") == std::string::npos);
  a.deallocate(p);
  a.deallocate(q);
}

TEST_CASE("summary of PyTorch's reference snapshot") {
  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  const auto snap = gmp::load_snapshot(std::string(src != nullptr ? src : ".") + "/tests/data/resnet50_train.snapshot.pickle");
  const auto s = gmp::summarize(snap);
  CHECK(s.segments == 109);
  CHECK(s.usage.reserved == 3684696064ull);  // 3514 MiB, as pytorch_stats.json says
  CHECK(s.usage.live_blocks == 3);
  CHECK(s.trace_actions[static_cast<std::size_t>(gmp::TraceAction::alloc)] == 3186);
  CHECK(s.trace_actions[static_cast<std::size_t>(gmp::TraceAction::segment_alloc)] == 109);
  CHECK(s.usage.requested + s.usage.internal_free() + s.usage.unallocated() == s.usage.reserved);
  REQUIRE_FALSE(s.sites.empty());
  CHECK(s.sites.front().live_bytes >= s.sites.back().live_bytes);
  const std::string text = gmp::format_summary(s);
  CHECK_THAT(text, Contains("segments: 109"));
  CHECK_THAT(text, Contains("3186 alloc"));
  CHECK_THAT(text, Contains("top allocation sites by live bytes:"));
  CHECK_THAT(text, Contains(".py:"));  // a site named by a Python frame of the recorded program
}
