// Layer 4: LeakDetector's bodies (leak_detector.hpp declares them): the growth fit, the
// survivor bookkeeping and the report's text. Included by that header in header-only mode;
// compiled once in the library (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a
// header to include on its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC bool LeakReport::leak_suspected() const noexcept {
  return std::any_of(growth.begin(), growth.end(), [](const auto& g) { return g.leak_suspected; }) ||
         std::any_of(survivors.begin(), survivors.end(), [](const auto& s) { return s.leak_suspected; });
}

GPUMEMPROF_FUNC std::string LeakReport::format() const {
  std::string out = leak_suspected() ? "Leak suspected.\n" : "No leak suspected.\n";
  char line[512];
  for (const MemoryGrowth& g : growth) {
    std::snprintf(line, sizeof line, "  %-24s %s %" PRIu64 " %s: %s\n", g.name.c_str(),
                  g.leak_suspected ? "LEAK " : "ok   ", g.calls, plural(g.calls, "call").c_str(), g.reason.c_str());
    out += line;
  }
  for (const SurvivingAllocations& s : survivors) {
    std::snprintf(line, sizeof line,
                  "  %-24s %s %" PRIu64 " %s, %s, from %" PRIu64 " %s (#%" PRIu64 "..#%" PRIu64 ") still alive: ",
                  s.name.c_str(), s.leak_suspected ? "LEAK " : "kept ", s.blocks, plural(s.blocks, "block").c_str(),
                  format_size(static_cast<std::uint64_t>(s.bytes)).c_str(), s.calls, plural(s.calls, "call").c_str(),
                  s.first_call, s.last_call);
    out += line;
    out += s.site;
    out += '\n';
  }
  return out;
}

GPUMEMPROF_FUNC std::ostream& operator<<(std::ostream& os, const LeakReport& r) { return os << r.format(); }

namespace detail {

/// Least-squares fit of y against 0..n-1.
struct LineFit {
  double slope = 0.0;
  double t_statistic = 0.0;
};

GPUMEMPROF_FUNC LineFit fit_line(const std::deque<std::int64_t>& y) {
  const auto n = static_cast<double>(y.size());
  if (y.size() < 3) return {};
  const double x_mean = (n - 1.0) / 2.0;
  double y_mean = 0.0;
  for (const auto v : y) y_mean += static_cast<double>(v);
  y_mean /= n;
  double sxx = 0.0;
  double sxy = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double dx = static_cast<double>(i) - x_mean;
    sxx += dx * dx;
    sxy += dx * (static_cast<double>(y[i]) - y_mean);
  }
  LineFit f;
  f.slope = sxy / sxx;
  double sse = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double r = static_cast<double>(y[i]) - (y_mean + f.slope * (static_cast<double>(i) - x_mean));
    sse += r * r;
  }
  const double se = std::sqrt(sse / (n - 2.0) / sxx);
  // An exact line leaves only rounding noise: treat a relative residual below 1e-9 as none.
  const double scale = std::max(1.0, std::abs(f.slope) * 1e-9);
  if (se <= scale * 1e-9 || se == 0.0) {
    f.t_statistic = f.slope > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  } else {
    f.t_statistic = f.slope / se;
  }
  return f;
}

/// True when the means of `segments` consecutive groups of y strictly increase.
GPUMEMPROF_FUNC bool segment_means_increase(const std::deque<std::int64_t>& y, std::size_t segments) {
  segments = std::max<std::size_t>(2, std::min(segments, y.size()));
  double previous = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < segments; ++k) {
    const std::size_t lo = k * y.size() / segments;
    const std::size_t hi = (k + 1) * y.size() / segments;
    double sum = 0.0;
    for (std::size_t i = lo; i < hi; ++i) sum += static_cast<double>(y[i]);
    const double mean = sum / static_cast<double>(hi - lo);
    if (!(mean > previous)) return false;
    previous = mean;
  }
  return true;
}

GPUMEMPROF_FUNC std::vector<LiveBlock> live_blocks(const MemorySource& source) {
  std::vector<LiveBlock> out;
  for (const SegmentView& seg : source.segments()) {
    for (const BlockView& b : seg.blocks) {
      if (b.state == BlockState::active_allocated) out.push_back({b.address, b.size, b.requested_size, b.context});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

GPUMEMPROF_FUNC bool contains(const std::vector<LiveBlock>& sorted, const LiveBlock& b) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), b);
  return it != sorted.end() && it->same_block(b);
}

}  // namespace detail

GPUMEMPROF_FUNC LeakCall::LeakCall(LeakDetector& detector, std::string_view name)
    : detector_(&detector),
      name_(name),
      began_(detail::wall_seconds(std::chrono::steady_clock::now())),
      at_entry_(detector.live_now()) {}

GPUMEMPROF_FUNC void LeakCall::end() {
  if (detector_ == nullptr) return;
  std::exchange(detector_, nullptr)->end_call(name_, at_entry_, began_);
}

GPUMEMPROF_FUNC LeakDetector::~LeakDetector() = default;

GPUMEMPROF_FUNC LeakDetector::NameState& LeakDetector::state(std::string_view name) {
  auto it = names_.find(name);
  if (it == names_.end()) it = names_.emplace(std::string(name), NameState{}).first;
  return it->second;
}

GPUMEMPROF_FUNC void LeakDetector::observe(const ProfileResult& result) {
  const std::int64_t after = result.allocator_level ? result.memory_after.allocated_memory
                                                    : result.memory_after.device_used_memory.value_or(0);
  const double begin = result.memory_before.timestamp;
  const double end = result.memory_after.timestamp;
  std::lock_guard lock(mutex_);
  add_point_locked(state(result.name), after,
                   begin > 0 && end >= begin ? std::optional<Interval>(Interval{begin, end}) : std::nullopt);
}
GPUMEMPROF_FUNC void LeakDetector::observe(const std::vector<ProfileResult>& results) {
  for (const auto& r : results) observe(r);
}
GPUMEMPROF_FUNC void LeakDetector::add_point(std::string_view name, std::int64_t bytes_after) {
  std::lock_guard lock(mutex_);
  add_point_locked(state(name), bytes_after, std::nullopt);
}

GPUMEMPROF_FUNC LeakReport LeakDetector::report() const {
  std::lock_guard lock(mutex_);
  LeakReport r;
  for (const auto& [name, st] : names_) {
    r.growth.push_back(judge_growth(name, st));
    add_survivors(name, st, r.survivors);
  }
  return r;
}

GPUMEMPROF_FUNC void LeakDetector::clear() {
  std::lock_guard lock(mutex_);
  names_.clear();
}

GPUMEMPROF_FUNC void LeakDetector::add_point_locked(NameState& st, std::int64_t bytes_after,
                                                    std::optional<Interval> when) {
  if (when) {
    for (auto it = st.seen.rbegin(); it != st.seen.rend(); ++it) {
      if (when->begin >= it->end || it->begin >= when->end) continue;  // touching is not overlapping
      // The same call seen twice (tracked and observed, in either order, now or in a batch
      // later): one point; the newest call keeps the reading taken last.
      if (it == st.seen.rbegin() && when->end >= it->end && st.last_in_series) st.series.back() = bytes_after;
      *it = Interval{std::min(when->begin, it->begin), std::max(when->end, it->end)};
      return;
    }
    st.seen.push_back(*when);
    if (st.seen.size() > kSeenCalls) st.seen.pop_front();
  }
  st.last_in_series = false;
  ++st.calls;
  if (st.calls <= options_.warmup_calls) return;
  st.last_in_series = true;
  st.series.push_back(bytes_after);
  while (st.series.size() > std::max<std::size_t>(options_.window, 3)) st.series.pop_front();
}

GPUMEMPROF_FUNC std::vector<detail::LiveBlock> LeakDetector::live_now() const {
  if (source_ == nullptr) throw std::logic_error("LeakDetector::track needs a memory source");
  return detail::live_blocks(*source_);
}

GPUMEMPROF_FUNC void LeakDetector::end_call(std::string_view name, const std::vector<detail::LiveBlock>& at_entry,
                                            double began) {
  std::vector<detail::LiveBlock> at_exit = live_now();
  const double ended = detail::wall_seconds(std::chrono::steady_clock::now());
  std::int64_t in_use = source_->gauges().allocated_bytes;
  if (!source_->allocator_level()) {
    const MemInfo info = source_->mem_get_info();
    in_use = static_cast<std::int64_t>(info.total - info.free);
  }
  std::lock_guard lock(mutex_);
  NameState& st = state(name);
  add_point_locked(st, in_use, Interval{began, ended});
  const std::uint64_t call = st.tracked_calls++;
  // Blocks followed from earlier calls survive this one only if alive at both of its ends.
  std::erase_if(st.followed, [&](Followed& f) {
    if (!detail::contains(at_entry, f.block) || !detail::contains(at_exit, f.block)) return true;
    ++f.survived;
    return false;
  });
  for (const detail::LiveBlock& b : at_exit) {
    if (st.followed.size() >= options_.max_followed_blocks) break;
    if (!detail::contains(at_entry, b)) st.followed.push_back({b, call, 0});
  }
}

GPUMEMPROF_FUNC MemoryGrowth LeakDetector::judge_growth(const std::string& name, const NameState& st) const {
  MemoryGrowth g;
  g.name = name;
  g.calls = st.calls;
  g.calls_fitted = st.series.size();
  char text[256];
  if (st.series.size() < std::max<std::size_t>(options_.min_calls, 3)) {
    std::snprintf(text, sizeof text, "not judged: %zu of %zu calls after warm-up", st.series.size(),
                  std::max<std::size_t>(options_.min_calls, 3));
    g.reason = text;
    return g;
  }
  const detail::LineFit fit = detail::fit_line(st.series);
  g.slope = fit.slope;
  g.t_statistic = fit.t_statistic;
  // What the fitted calls added: each call's growth (its end over the previous call's end) is
  // the slope, so n calls add n slopes -- the sum of the per-step growth that `gpumemprof
  // summary` prints for the same steps (not n - 1: the first fitted call grew too).
  const double growth = fit.slope * static_cast<double>(st.series.size());
  g.growth = static_cast<std::int64_t>(std::llround(growth));
  const bool significant = fit.slope > 0 && fit.t_statistic >= options_.min_t_statistic;
  const bool beyond_noise = growth > static_cast<double>(options_.tolerance_bytes);
  const bool steady = detail::segment_means_increase(st.series, options_.segments);
  g.leak_suspected = significant && beyond_noise && steady;
  const std::string per_call = format_size(static_cast<std::uint64_t>(std::llround(std::abs(fit.slope))));
  // How well the line fits: the t statistic, or "exact" when every call grew alike.
  char fit_text[48];
  if (std::isinf(fit.t_statistic)) {
    std::snprintf(fit_text, sizeof fit_text, "the same every call");
  } else {
    std::snprintf(fit_text, sizeof fit_text, "t = %.1f", fit.t_statistic);
  }
  if (g.leak_suspected) {
    std::snprintf(text, sizeof text, "grows %s per call (%s), %s over the last %zu calls", per_call.c_str(), fit_text,
                  format_size(static_cast<std::uint64_t>(g.growth)).c_str(), st.series.size());
  } else {
    std::snprintf(text, sizeof text, "%s (slope %s%s per call, %s)",
                  !significant    ? "no significant growth"
                  : !beyond_noise ? "growth within tolerance"
                                  : "growth not steady (a one-off step or a plateau)",
                  fit.slope < 0 ? "-" : "", per_call.c_str(), fit_text);
  }
  g.reason = text;
  return g;
}

GPUMEMPROF_FUNC void LeakDetector::add_survivors(const std::string& name, const NameState& st,
                                                 std::vector<SurvivingAllocations>& out) const {
  // Group by site: the allocating line when history recorded a stack (one line reached
  // through different allocator or library paths has several contexts), else the context,
  // else the requested size.
  std::map<std::uint64_t, Frames> stacks;  // context -> frames, resolved once per report
  std::map<std::string, SurvivingAllocations> sites;
  std::map<std::string, std::vector<std::uint64_t>> site_calls;
  for (const Followed& f : st.followed) {
    if (f.survived < options_.min_survived_calls) continue;
    const detail::LiveBlock& b = f.block;
    Frames frames;
    if (b.context != 0 && source_ != nullptr) {
      auto it = stacks.find(b.context);
      if (it == stacks.end()) it = stacks.emplace(b.context, source_->frames_of(b.context)).first;
      frames = it->second;
    }
    // The one rule (analysis/user_frame.hpp); "" without frames (where user_frame() gives none).
    const std::string label = frames && !frames->empty() ? user_frame_label(frames) : std::string();
    const std::string key = !label.empty()   ? "line " + label
                            : b.context != 0 ? "context " + std::to_string(b.context)
                                             : "size " + std::to_string(b.requested);
    SurvivingAllocations& s = sites[key];
    if (s.blocks == 0) {
      s.name = name;
      s.context = b.context;
      s.requested_size = frames == nullptr && b.context == 0 ? b.requested : 0;
      s.first_call = f.call;
      s.frames = frames;
      s.site = !label.empty() ? label
                              : "requests of " + format_size(b.requested) +
                                    (b.context != 0 ? " (allocation context " + std::to_string(b.context) + ")" : "");
    }
    ++s.blocks;
    s.bytes += static_cast<std::int64_t>(b.size);
    s.first_call = std::min(s.first_call, f.call);
    s.last_call = std::max(s.last_call, f.call);
    if (s.addresses.size() < 8) s.addresses.push_back(b.address);
    auto& calls = site_calls[key];
    if (calls.empty() || calls.back() != f.call) calls.push_back(f.call);  // followed is in call order
  }
  for (auto& [key, s] : sites) {
    s.calls = site_calls[key].size();
    s.leak_suspected = s.calls >= options_.min_leaking_calls;
    out.push_back(std::move(s));
  }
}

GPUMEMPROF_NAMESPACE_END
