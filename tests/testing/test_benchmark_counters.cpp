// MemoryCounters (gpumemprof/testing/benchmark.hpp) in a benchmark run programmatically: the
// counters are captured by a reporter and checked exactly on a simulated device.
#include "gpumemprof/testing/benchmark.hpp"

#include <map>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/size_literals.hpp"

namespace gmp = gpumemprof;
using namespace gmp::literals;

namespace {

/// Keeps every run's counters.
class CaptureReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context& /*context*/) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) counters[run.benchmark_name()] = run.counters;
  }
  std::map<std::string, benchmark::UserCounters> counters;
};

/// 8 MiB kept from setup (not counted), then per iteration 1 MiB (small pool) and 3 MiB (large
/// pool) allocated and freed.
void BM_two_allocations(benchmark::State& state) {
  auto& a = gmp::default_allocator("sim:5");
  void* setup = a.allocate(8_MiB);
  {
    gmp::testing::MemoryCounters mem(state, "sim:5");
    for (auto _ : state) {
      void* p = a.allocate(1_MiB);
      void* q = a.allocate(3_MiB);
      benchmark::DoNotOptimize(p);
      a.deallocate(q);
      a.deallocate(p);
    }
  }
  a.deallocate(setup);
}

}  // namespace

TEST_CASE("MemoryCounters reports the loop's peak, reserved peak, allocations and bytes per iteration") {
  benchmark::RegisterBenchmark("two_allocations", BM_two_allocations)->Iterations(10);
  CaptureReporter reporter;
  REQUIRE(benchmark::RunSpecifiedBenchmarks(&reporter) == 1);
  REQUIRE(reporter.counters.count("two_allocations/iterations:10") == 1);
  const benchmark::UserCounters& c = reporter.counters["two_allocations/iterations:10"];
  // Absolute peak: the 8 MiB from setup plus both blocks.
  CHECK(c.at("peak_bytes").value == static_cast<double>(12_MiB));
  // Reserved: the setup's 20 MiB large segment holds the 3 MiB block too; the small pool adds a
  // 2 MiB segment (PyTorch's kLargeBuffer and kSmallBuffer).
  CHECK(c.at("reserved_peak_bytes").value == static_cast<double>(22_MiB));
  CHECK(c.at("allocs_per_iter").value == 2.0);
  CHECK(c.at("bytes_per_iter").value == static_cast<double>(4_MiB));
  gmp::default_allocator("sim:5").validate();
}
