// Layer 6: Catch2 matchers for memory budgets in tests (Catch2 v2 and v3).
//
//   using namespace gpumemprof::literals;
//   REQUIRE_THAT(profiler.profile_function("step", step), gmp::testing::PeakBelow(64_MiB));
//   REQUIRE_THAT(profiler.profile_function("step", step), gmp::testing::PeakIncreaseBelow(16_MiB));
//   REQUIRE_THAT(profiler.profile_function("step", step), gmp::testing::NoNetGrowth());
//   REQUIRE_THAT(profiler.profile_function("step", step), gmp::testing::AllocationsAtMost(100));
//
// A failure states the measured value and the budget in PyTorch's units, the scope name, and,
// when history records stacks on the device, the allocation sites: for the peak budgets those
// live when the scope reached its peak ("peak 96.00 MiB > budget 64.00 MiB in "step"; live at
// the scope's peak ..."), for the others those holding the most live memory after the scope.
// It includes Catch2 itself (TEST_CASE, REQUIRE_THAT, ...): v3's headers when present, else v2's
// catch2/catch.hpp.
#pragma once

#if __has_include(<catch2/matchers/catch_matchers.hpp>)
#include <catch2/catch_test_macros.hpp>
#include <catch2/catch_tostring.hpp>
#include <catch2/matchers/catch_matchers.hpp>
#define GPUMEMPROF_CATCH2_MAJOR 3
#elif __has_include(<catch2/catch.hpp>)
#include <catch2/catch.hpp>
#define GPUMEMPROF_CATCH2_MAJOR 2
#else
#error "gpumemprof/testing/catch2.hpp needs Catch2 v2 (catch2/catch.hpp) or v3 (catch2/matchers/catch_matchers.hpp)"
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/size_literals.hpp"
#include "gpumemprof/analysis/peak_moment.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/profiler/profile_result.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace testing {

#if GPUMEMPROF_CATCH2_MAJOR == 3
template <class T>
using CatchMatcherBase = Catch::Matchers::MatcherBase<T>;
#else
template <class T>
using CatchMatcherBase = Catch::MatcherBase<T>;
#endif

/// Live allocation sites reported with a failed budget.
inline constexpr std::size_t kBudgetSites = 3;

namespace detail {

/// The device a result's sites are read from: `chosen`, else the device the result was measured
/// on; nullopt when neither names a device.
[[nodiscard]] inline std::optional<Device> sites_device(const ProfileResult& r, const std::optional<Device>& chosen) {
  if (chosen) return chosen;
  try {
    return Device(r.device);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// The top live allocation sites of `device` in words, or why there are none.
[[nodiscard]] inline std::string live_sites(const std::optional<Device>& device, std::size_t top) {
  if (!device) return "";
  try {
    const SnapshotSummary s = summarize(snapshot(*device));
    std::string out;
    std::size_t n = 0;
    for (const SiteUsage& site : s.sites) {
      if (user_frame(site.frames) == nullptr) continue;
      if (n++ == top) break;
      out += "\n  " + format_size(site.live_bytes) + " in " + std::to_string(site.blocks) + " " +
             plural(site.blocks, "block") + ": " + user_frame_label(site.frames);
    }
    if (n == 0) {
      return "; no allocation stacks on " + device->str() +
             " (turn history on to see the sites: gmp::record_memory_history({}, \"" + device->str() + "\"))";
    }
    return "; top live allocation sites on " + device->str() + ":" + out;
  } catch (const std::exception& e) {
    return std::string("; allocation sites unavailable: ") + e.what();
  }
}

/// What was live when the scope of `r` reached its peak, by site, from `device`'s history (the
/// trace entries between the scope's start and end); the live sites now when history recorded
/// no entries then.
[[nodiscard]] inline std::string peak_sites(const ProfileResult& r, const std::optional<Device>& device,
                                            std::size_t top) {
  if (!device) return "";
  try {
    const Snapshot snap = snapshot(*device);
    // Scope readings are seconds; the slack of a microsecond covers the two clocks' rounding.
    const auto us = [](double seconds) { return static_cast<std::int64_t>(std::llround(seconds * 1e6)); };
    const PeakMoment m =
        peak_moment(snap, device->index(), us(r.memory_before.timestamp) - 1, us(r.memory_after.timestamp) + 1);
    if (!m.found) return live_sites(device, top);
    std::string out;
    std::size_t n = 0;
    for (const PeakSite& site : m.sites) {
      if (n++ == top) break;
      out += "\n  " + format_size(site.bytes) + " in " + std::to_string(site.blocks) + " " +
             plural(site.blocks, "block") + (site.in_window ? ", allocated in the scope: " : ", held from before: ") +
             site.site;
    }
    return "; live at the scope's peak on " + device->str() + " (" +
           format_size(static_cast<std::uint64_t>(m.held_bytes)) + " requested):" + out;
  } catch (const std::exception& e) {
    return std::string("; allocation sites unavailable: ") + e.what();
  }
}

/// The shared shape of the budget matchers: `measure` reads the value, `budget` bounds it,
/// `what` names it; the measured value and the sites are kept from match() for describe().
class BudgetMatcher : public CatchMatcherBase<ProfileResult> {
 public:
  BudgetMatcher(std::string what, std::int64_t budget, std::optional<Device> device)
      : what_(std::move(what)), budget_(budget), device_(std::move(device)) {}

  bool match(const ProfileResult& r) const override {
    measured_ = measure(r);
    name_ = r.name;
    const bool ok = measured_ <= budget_;
    if (!ok) {
      const std::optional<Device> device = sites_device(r, device_);
      sites_ = about_peak() ? peak_sites(r, device, kBudgetSites) : live_sites(device, kBudgetSites);
    }
    return ok;
  }

  /// After match(): "<what> 96.00 MiB > budget 64.00 MiB in "step"" (and the sites on failure);
  /// before: the budget alone.
  std::string describe() const override {
    if (!measured_) return what_ + " at most " + format_budget();
    const bool ok = *measured_ <= budget_;
    return what_ + " " + format_value(*measured_) + (ok ? " <= budget " : " > budget ") + format_budget() + " in \"" +
           name_ + "\"" + (ok ? "" : sites_);
  }

  [[nodiscard]] std::int64_t budget() const noexcept { return budget_; }

 protected:
  [[nodiscard]] virtual std::int64_t measure(const ProfileResult& r) const = 0;
  /// True when the measure is the scope's peak: a failure names what was live at the peak.
  [[nodiscard]] virtual bool about_peak() const { return false; }
  [[nodiscard]] virtual std::string format_value(std::int64_t v) const { return format_signed_size(v); }
  [[nodiscard]] std::string format_budget() const { return format_value(budget_); }

 private:
  std::string what_;
  std::int64_t budget_;
  std::optional<Device> device_;
  mutable std::optional<std::int64_t> measured_;
  mutable std::string name_;
  mutable std::string sites_;
};

[[nodiscard]] inline std::int64_t to_budget(unsigned long long bytes) {
  return bytes > static_cast<unsigned long long>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(bytes);
}

}  // namespace detail

/// Passes when the highest allocated bytes during the scope (peak_memory_usage(): absolute,
/// including what was held when it began) are at most `bytes`.
/// `sites_from`: the device whose live allocation sites a failure lists (default: the device the
/// result was measured on).
class PeakBelow final : public detail::BudgetMatcher {
 public:
  explicit PeakBelow(unsigned long long bytes, std::optional<Device> sites_from = std::nullopt)
      : BudgetMatcher("peak", detail::to_budget(bytes), std::move(sites_from)) {}

 protected:
  std::int64_t measure(const ProfileResult& r) const override { return r.peak_memory_usage(); }
  bool about_peak() const override { return true; }
};

/// Passes when the scope's peak rose at most `bytes` above the allocated bytes at its start
/// (peak_increase()): a budget for the step itself, whatever was held before it.
class PeakIncreaseBelow final : public detail::BudgetMatcher {
 public:
  explicit PeakIncreaseBelow(unsigned long long bytes, std::optional<Device> sites_from = std::nullopt)
      : BudgetMatcher("peak increase", detail::to_budget(bytes), std::move(sites_from)) {}

 protected:
  std::int64_t measure(const ProfileResult& r) const override { return r.peak_increase(); }
  bool about_peak() const override { return true; }
};

/// Passes when the scope's net change (memory_diff()) is at most `tolerance_bytes`.
class NoNetGrowth final : public detail::BudgetMatcher {
 public:
  explicit NoNetGrowth(unsigned long long tolerance_bytes = 0, std::optional<Device> sites_from = std::nullopt)
      : BudgetMatcher("net growth", detail::to_budget(tolerance_bytes), std::move(sites_from)) {}

 protected:
  std::int64_t measure(const ProfileResult& r) const override { return r.memory_diff(); }
};

/// Passes when the scope made at most `n` allocations (tensors_created).
class AllocationsAtMost final : public detail::BudgetMatcher {
 public:
  explicit AllocationsAtMost(unsigned long long n, std::optional<Device> sites_from = std::nullopt)
      : BudgetMatcher("allocations", detail::to_budget(n), std::move(sites_from)) {}

 protected:
  std::int64_t measure(const ProfileResult& r) const override { return r.tensors_created; }
  std::string format_value(std::int64_t v) const override { return std::to_string(v); }
};

/// A ProfileResult in one line, as Catch prints the checked value.
[[nodiscard]] inline std::string describe_result(const ProfileResult& r) {
  return "ProfileResult \"" + r.name + "\" (peak " + format_signed_size(r.peak_memory_usage()) + ", " +
         format_signed_size(r.peak_increase()) + " above its start, net " + format_signed_size(r.memory_diff()) + ", " +
         std::to_string(r.tensors_created) + " allocations, " + std::to_string(r.tensors_deleted) + " frees" +
         (r.threw() ? ", threw: " + *r.exception_message : "") + ")";
}

}  // namespace testing
GPUMEMPROF_NAMESPACE_END

template <>
struct Catch::StringMaker<gpumemprof::ProfileResult> {
  static std::string convert(const gpumemprof::ProfileResult& r) { return gpumemprof::testing::describe_result(r); }
};
