// Layer 5: the HTML report's level of detail -- what a device's page carries when its trace is
// too long to embed whole (a 10M-entry trace would be a 100 MB page that no browser opens fast).
//
// States: the trace's states 1..E are cut into at most max_states - 2 equal runs, and the page
// keeps one state per run: the one with the most active bytes (so the peak and every local
// maximum the view can resolve survive), plus state 0 and the last state E. Times, reserved bytes and OOMs move to
// the kept states; active bytes at each kept state are exact and embedded.
// Allocations: only those live at a kept state can be drawn; of those, at most max_allocations
// are embedded (a band each): every one live at the peak, then those covering the most bytes x
// states (so the weights that are there all along come before short-lived spikes). The others
// are part of the embedded active bytes (the gray "smaller allocations" band). Per-site figures (count, bytes, live at
// the end, at the peak, largest) are computed over every allocation and embedded, so the sites table is exact.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/export/reports/html_report_model.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Reduces `dev` to at most `max_states` states and `max_allocations` allocations (0: no
/// limit) as the file comment says; a device within both limits is left as it is.
inline void apply_html_level_of_detail(HtmlDevice& dev, std::size_t max_states, std::size_t max_allocations) {
  const std::uint64_t E = dev.times.size();
  const std::size_t n = dev.allocations.size();
  if (max_states != 0) max_states = std::max<std::size_t>(max_states, 3);
  const bool few_states = max_states == 0 || E + 1 <= max_states;
  if (few_states && (max_allocations == 0 || n <= max_allocations)) return;
  HtmlLevelOfDetail& lod = dev.lod;
  lod.applied = true;
  lod.events = E;
  lod.allocations = n;

  std::vector<std::int64_t> active(E + 2, 0);
  for (const HtmlAllocation& a : dev.allocations) {
    active[a.start] += static_cast<std::int64_t>(a.size);
    active[a.end] -= static_cast<std::int64_t>(a.size);
  }
  for (std::uint64_t s = 1; s < E + 2; ++s) active[s] += active[s - 1];

  // The kept states, ascending.
  std::vector<std::uint64_t>& keep = lod.state_event;
  keep.push_back(0);
  const std::uint64_t runs = few_states ? E : max_states - 2;
  const std::uint64_t run = runs == 0 ? 1 : (E + runs - 1) / runs;
  for (std::uint64_t r0 = 1; r0 <= E; r0 += run) {
    std::uint64_t best = r0;
    for (std::uint64_t s = r0 + 1; s < r0 + run && s <= E; ++s) {
      if (active[s] > active[best]) best = s;
    }
    keep.push_back(best);
  }
  if (keep.back() != E) keep.push_back(E);  // the end state: final reserved bytes, last OOMs
  // Page state of a trace state x: the first kept state at or after it (E + 1 -> past the last).
  const auto page = [&](std::uint64_t x) {
    return static_cast<std::uint64_t>(std::lower_bound(keep.begin(), keep.end(), x) - keep.begin());
  };
  lod.active.reserve(keep.size());
  for (const std::uint64_t s : keep)
    lod.active.push_back(static_cast<std::uint64_t>(std::max<std::int64_t>(active[s], 0)));
  std::vector<std::int64_t>().swap(active);

  // Sites, over every allocation.
  const std::uint64_t peak = dev.summary.peak_requested_state;
  std::unordered_map<std::int32_t, std::size_t> site_of;
  for (const HtmlAllocation& a : dev.allocations) {
    const auto [it, added] = site_of.try_emplace(a.stack, lod.sites.size());
    if (added) lod.sites.push_back(HtmlLevelOfDetail::Site{a.stack});
    HtmlLevelOfDetail::Site& site = lod.sites[it->second];
    ++site.count;
    site.total += a.size;
    if (a.end > E) {
      site.live += a.size;
      ++lod.live_at_end;
    }
    if (a.start <= peak && peak < a.end) site.peak += a.size;
    site.largest = std::max(site.largest, a.size);
  }

  // Allocations live at a kept state; when there are too many, those live at the peak and then
  // those covering the most bytes x page states (long-lived weights before short-lived spikes).
  struct Shown {
    std::uint32_t index;
    bool at_peak;
    double area;
  };
  const std::uint64_t peak_page = page(peak);
  std::vector<Shown> shown;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t a = page(dev.allocations[i].start);
    const std::uint64_t b = page(dev.allocations[i].end);
    if (a < b) {
      shown.push_back(Shown{static_cast<std::uint32_t>(i), a <= peak_page && peak_page < b,
                            static_cast<double>(dev.allocations[i].size) * static_cast<double>(b - a)});
    }
  }
  if (max_allocations != 0 && shown.size() > max_allocations) {
    const auto first = [](const Shown& x, const Shown& y) {
      if (x.at_peak != y.at_peak) return x.at_peak;
      return x.area != y.area ? x.area > y.area : x.index < y.index;
    };
    std::nth_element(shown.begin(), shown.begin() + static_cast<std::ptrdiff_t>(max_allocations), shown.end(), first);
    shown.resize(max_allocations);
    std::sort(shown.begin(), shown.end(), [](const Shown& x, const Shown& y) { return x.index < y.index; });
  }
  lod.hidden = n - shown.size();
  std::vector<HtmlAllocation> kept;
  kept.reserve(shown.size());
  for (const Shown& x : shown) {
    HtmlAllocation a = dev.allocations[x.index];
    a.start = page(a.start);
    a.end = page(a.end);
    kept.push_back(a);
  }
  dev.allocations = std::move(kept);

  // Everything else indexed by state or entry.
  std::vector<std::int64_t> times;
  times.reserve(keep.size() - 1);
  for (std::size_t j = 1; j < keep.size(); ++j) times.push_back(dev.times[keep[j] - 1]);
  dev.times = std::move(times);
  for (auto& change : dev.reserved_changes) change.first = page(change.first);
  for (std::uint64_t& e : dev.ooms) e = page(e + 1) - 1;  // entry e produces state e + 1
  dev.summary.peak_requested_state = page(peak);
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
