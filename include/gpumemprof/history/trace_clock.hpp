// Layer 3: the clock of history events. Recording reads a raw tick (the TSC on x86-64: ~7 ns,
// versus ~16 ns for steady_clock); ticks become microseconds since the Unix epoch only when a
// snapshot is taken. Like PyTorch's approximate clock, the conversion is linear between two
// calibration points -- one taken when the clock is first used, one at conversion -- each
// pairing a tick with steady_clock. The epoch offset is fixed once from system_clock, so
// converted times never go backwards even if the wall clock is set back.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define GPUMEMPROF_TRACE_CLOCK_TSC 1  // the compiler's builtin, not <x86intrin.h> (50k lines)
#else
#define GPUMEMPROF_TRACE_CLOCK_TSC 0
#endif

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class TraceClock {
 public:
  using Tick = std::uint64_t;

  /// The raw tick now: cheap, monotonic on one core (callers clamp across cores).
  [[nodiscard]] static Tick now() noexcept {
#if GPUMEMPROF_TRACE_CLOCK_TSC
    return __builtin_ia32_rdtsc();
#else
    return static_cast<Tick>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }

  /// Converts ticks to microseconds since the Unix epoch with one calibration, so a batch of
  /// converted times keeps the order of the ticks.
  class Converter {
   public:
    [[nodiscard]] std::int64_t to_us(Tick t) const noexcept {
      const double dt = static_cast<double>(static_cast<std::int64_t>(t - base_.tick));
      return epoch_us_ + static_cast<std::int64_t>(dt * ns_per_tick_ / 1000.0);
    }

   private:
    friend class TraceClock;
    struct Point {
      Tick tick = 0;
      std::int64_t steady_ns = 0;
    };
    Point base_;
    std::int64_t epoch_us_ = 0;
    double ns_per_tick_ = 1.0;
  };

  [[nodiscard]] static Converter converter() noexcept {
    const Base& b = base();
    Converter c;
    c.base_ = b.point;
    c.epoch_us_ = b.epoch_us;
#if GPUMEMPROF_TRACE_CLOCK_TSC
    const Converter::Point p = sample();
    const auto ticks = static_cast<double>(p.tick - b.point.tick);
    const auto ns = static_cast<double>(p.steady_ns - b.point.steady_ns);
    // Over a short interval the ratio is noisy, but every tick converted lies inside that
    // interval, so its error stays within the jitter of one clock read.
    c.ns_per_tick_ = ticks > 0 && ns > 0 ? ns / ticks : 0.0;
#endif
    return c;
  }

  /// Calibrates now (also done lazily on first use), so later conversions span a longer interval.
  static void warm_up() noexcept { (void)base(); }

 private:
  struct Base {
    Converter::Point point;
    std::int64_t epoch_us = 0;
  };

  static std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // A (tick, steady) pair read as close together as we can: the best of three tries.
  static Converter::Point sample() noexcept {
    Converter::Point best;
    Tick best_gap = ~Tick{0};
    for (int i = 0; i < 3; ++i) {
      const Tick t0 = now();
      const std::int64_t ns = steady_ns();
      const Tick t1 = now();
      if (t1 - t0 < best_gap) {
        best_gap = t1 - t0;
        best = {t0 + (t1 - t0) / 2, ns};
      }
    }
    return best;
  }

  static const Base& base() noexcept {
    static const Base b = [] {
      Base out;
      out.point = sample();
      const auto sys_us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      // The epoch time of the base tick: the wall clock minus the time since the base sample.
      out.epoch_us = sys_us - (steady_ns() - out.point.steady_ns) / 1000;
      return out;
    }();
    return b;
  }
};

GPUMEMPROF_NAMESPACE_END
