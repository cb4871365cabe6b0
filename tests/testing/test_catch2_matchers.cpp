// The Catch2 budget matchers (gpumemprof/testing/catch2.hpp): pass/fail against budgets, and the
// failure text -- measured value and budget in PyTorch's units, the scope name, and the live
// allocation sites when history records stacks. Matcher objects are called directly (match(),
// describe()) since a failing REQUIRE_THAT cannot be observed from inside a test.
#include "gpumemprof/testing/catch2.hpp"

#include <string>

#include "catch.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/profiler/profiler.hpp"

namespace gmp = gpumemprof;
using namespace gmp::literals;

namespace {

/// Keeps 96 MiB alive inside the scope, then frees it: peak 96 MiB, net 0.
void step_96mib(gmp::DeviceAllocator& a) {
  void* p = a.allocate(64_MiB);
  void* q = a.allocate(32_MiB);
  a.deallocate(q);
  a.deallocate(p);
}

void* leaked = nullptr;
/// Leaves 2 MiB behind (the allocation site the failure message must name).
void leaky_step(gmp::DeviceAllocator& a) { leaked = a.allocate(2_MiB); }

}  // namespace

TEST_CASE("size literals are bytes") {
  STATIC_REQUIRE(1_KiB == 1024ULL);
  STATIC_REQUIRE(64_MiB == 64ULL * 1024 * 1024);
  STATIC_REQUIRE(3_GiB == 3ULL << 30);
}

TEST_CASE("PeakBelow, NoNetGrowth and AllocationsAtMost judge a profiled call") {
  auto& a = gmp::default_allocator("sim:1");
  gmp::GPUMemoryProfiler profiler("sim:1");
  const gmp::ProfileResult r = profiler.profile_function("step", step_96mib, a);
  REQUIRE(r.peak_memory_usage() == static_cast<std::int64_t>(96_MiB));

  // The intended use, inside a passing test.
  REQUIRE_THAT(r, gmp::testing::PeakBelow(96_MiB));
  REQUIRE_THAT(r, gmp::testing::NoNetGrowth());
  REQUIRE_THAT(r, gmp::testing::AllocationsAtMost(2));

  const gmp::testing::PeakBelow tight(64_MiB);
  CHECK(tight.describe() == "peak at most 64.00 MiB");
  CHECK_FALSE(tight.match(r));
  CHECK(tight.describe().starts_with("peak 96.00 MiB > budget 64.00 MiB in \"step\""));

  const gmp::testing::AllocationsAtMost one(1);
  CHECK_FALSE(one.match(r));
  CHECK(one.describe().starts_with("allocations 2 > budget 1 in \"step\""));

  const gmp::testing::PeakBelow roomy(100_MiB);
  CHECK(roomy.match(r));
  CHECK(roomy.describe() == "peak 96.00 MiB <= budget 100.00 MiB in \"step\"");

  // How Catch prints the checked value.
  CHECK(Catch::Detail::stringify(r) ==
        "ProfileResult \"step\" (peak 96.00 MiB, 96.00 MiB above its start, net 0 bytes, 2 allocations, 2 frees)");
  a.validate();
}

TEST_CASE("peak_increase and PeakIncreaseBelow: the call's rise above what was held when it began") {
  auto& a = gmp::default_allocator("sim:4");
  gmp::GPUMemoryProfiler profiler("sim:4");
  void* held = a.allocate(100_MiB);
  const gmp::ProfileResult r = profiler.profile_function("step", [&] {
    void* p = a.allocate(1_MiB);
    a.deallocate(p);
  });
  // peak_memory_usage() is absolute (reset-then-read: what was held counts); peak_increase() is not.
  CHECK(r.peak_memory_usage() == static_cast<std::int64_t>(101_MiB));
  CHECK(r.peak_increase() == static_cast<std::int64_t>(1_MiB));
  REQUIRE_THAT(r, gmp::testing::PeakIncreaseBelow(1_MiB));
  CHECK_FALSE(gmp::testing::PeakBelow(100_MiB).match(r));

  const gmp::testing::PeakIncreaseBelow tight(512_KiB);
  CHECK(tight.describe() == "peak increase at most 512.00 KiB");
  CHECK_FALSE(tight.match(r));
  CHECK(tight.describe().starts_with("peak increase 1.00 MiB > budget 512.00 KiB in \"step\""));

  // A call that frees more than it allocates never rose: 0, not negative.
  const gmp::ProfileResult freeing = profiler.profile_function("free", [&] { a.deallocate(held); });
  CHECK(freeing.peak_increase() == 0);
  CHECK(gmp::testing::PeakIncreaseBelow(0).match(freeing));
  a.validate();
}

TEST_CASE("NoNetGrowth names the growth, the tolerance and, without history, how to see the sites") {
  auto& a = gmp::default_allocator("sim:2");
  gmp::GPUMemoryProfiler profiler("sim:2");
  const gmp::ProfileResult r = profiler.profile_function("leaky", leaky_step, a);
  CHECK(r.device == "sim:2");  // sites come from here even where the current device is a GPU
  CHECK(gmp::testing::NoNetGrowth(2_MiB).match(r));
  const gmp::testing::NoNetGrowth strict(4_KiB);
  CHECK_FALSE(strict.match(r));
  const std::string text = strict.describe();
  CHECK(text.starts_with("net growth 2.00 MiB > budget 4.00 KiB in \"leaky\""));
  CHECK_THAT(text, Catch::Matchers::Contains("no allocation stacks on sim:2"));
  a.deallocate(leaked);
  a.validate();
}

TEST_CASE("a failed budget lists the top live allocation sites when history records stacks") {
  auto& a = gmp::default_allocator("sim:3");
  gmp::record_memory_history({}, "sim:3");
  gmp::GPUMemoryProfiler profiler("sim:3");
  const gmp::ProfileResult r = profiler.profile_function("leaky", leaky_step, a);
  const gmp::testing::NoNetGrowth strict;
  CHECK_FALSE(strict.match(r));
  const std::string text = strict.describe();
  CHECK(text.starts_with("net growth 2.00 MiB > budget 0 bytes in \"leaky\""));
#if GPUMEMPROF_WITH_STACKTRACE
  CHECK_THAT(text, Catch::Matchers::Contains("; top live allocation sites on sim:3:\n  2.00 MiB in 1 block: "));
  CHECK_THAT(text, Catch::Matchers::Contains("test_catch2_matchers.cpp:"));
#else
  CHECK_THAT(text, Catch::Matchers::Contains("no allocation stacks on sim:3"));
#endif
  // An explicit device for the sites wins over the result's.
  const gmp::testing::NoNetGrowth elsewhere(0, gmp::Device("sim:4"));
  CHECK_FALSE(elsewhere.match(r));
  CHECK_THAT(elsewhere.describe(), Catch::Matchers::Contains("no allocation stacks on sim:4"));
  a.deallocate(leaked);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:3");
  a.validate();
}

namespace {
void* weights = nullptr;
/// Loads 256 MiB of weights that stay.
void load_weights(gmp::DeviceAllocator& a) { weights = a.allocate(256_MiB); }
/// A step whose 48 MiB of scratch makes the peak, freed before the scope ends.
void step_48mib(gmp::DeviceAllocator& a) {
  void* scratch = a.allocate(48_MiB);
  a.deallocate(scratch);
}
}  // namespace

TEST_CASE("a failed peak budget names what was live at the peak, not what is live afterwards") {
  auto& a = gmp::default_allocator("sim:5");
  gmp::record_memory_history({}, "sim:5");
  gmp::GPUMemoryProfiler profiler("sim:5");
  profiler.profile_function("load", load_weights, a);
  const gmp::ProfileResult r = profiler.profile_function("step", step_48mib, a);
  REQUIRE(r.peak_memory_usage() == static_cast<std::int64_t>(304_MiB));
  const gmp::testing::PeakBelow budget(300_MiB);
  CHECK_FALSE(budget.match(r));
  const std::string text = budget.describe();
  INFO(text);
  CHECK(
      text.starts_with("peak 304.00 MiB > budget 300.00 MiB in \"step\"; live at the scope's peak on sim:5 "
                       "(304.00 MiB requested):\n  48.00 MiB in 1 block, allocated in the scope: "));
  CHECK_THAT(text, Catch::Matchers::Contains("256.00 MiB in 1 block, held from before: "));
#if GPUMEMPROF_WITH_STACKTRACE
  CHECK_THAT(text, Catch::Matchers::Contains("allocated in the scope: (anonymous namespace)::step_48mib("));
  CHECK_THAT(text, Catch::Matchers::Contains("held from before: (anonymous namespace)::load_weights("));
#endif
  // The step's own rise names the same allocation.
  const gmp::testing::PeakIncreaseBelow rise(32_MiB);
  CHECK_FALSE(rise.match(r));
  CHECK_THAT(rise.describe(), Catch::Matchers::Contains("48.00 MiB in 1 block, allocated in the scope: "));
  a.deallocate(weights);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:5");
  a.validate();
}
