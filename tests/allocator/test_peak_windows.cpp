// Per-interval peaks: nested and overlapping windows, the global peak untouched.
#include "catch.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "sim_allocator.hpp"

TEST_CASE("PeakWindows: nested and overlapping windows each see their own peak") {
  gmp::detail::PeakWindows w;
  auto a = w.open(10);
  w.on_value(50);
  auto b = w.open(20);  // value dropped to 20 before b opened
  w.on_value(30);
  auto c = w.open(30);
  w.on_value(40);
  CHECK(w.peak(a) == 50);
  CHECK(w.peak(b) == 40);
  CHECK(w.peak(c) == 40);
  CHECK(w.close(b) == 40);  // closing the middle one folds its peak into a
  w.on_value(45);
  CHECK(w.peak(a) == 50);
  CHECK(w.peak(c) == 45);
  w.on_value(60);
  CHECK(w.close(c) == 60);
  CHECK(w.close(a) == 60);
  CHECK(w.open_count() == 0);
  CHECK_THROWS_AS(w.close(a), std::invalid_argument);
}

TEST_CASE("allocator peak windows leave max_memory_allocated alone") {
  SimAlloc s;
  void* base = s.a.allocate(8 * MiB);
  void* spike = s.a.allocate(16 * MiB);
  s.a.deallocate(spike);
  const auto global_peak = s.stats().allocated_bytes.all().peak;
  const auto outer = s.a.open_peak_window();
  void* x = s.a.allocate(4 * MiB);
  const auto inner = s.a.open_peak_window();
  void* y = s.a.allocate(2 * MiB);
  s.a.deallocate(y);
  const auto inner_peak = s.a.close_peak_window(inner);
  s.a.deallocate(x);
  const auto outer_peak = s.a.close_peak_window(outer);
  CHECK(outer_peak == static_cast<std::int64_t>(14 * MiB));  // 8 + 4 + 2 at its height
  CHECK(inner_peak == static_cast<std::int64_t>(14 * MiB));
  CHECK(s.stats().allocated_bytes.all().peak == global_peak);
  s.a.deallocate(base);
  s.a.validate();
}
