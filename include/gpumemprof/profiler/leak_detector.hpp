// Layer 4: LeakDetector -- finds memory that a repeatedly called function or scope leaves
// behind, two ways:
//
// 1. Growth. The allocated bytes after each call of a name form a series. Over the newest
//    `window` calls (after `warmup_calls`), a least-squares line is fitted; growth is reported
//    when (a) the slope is positive and significant (slope / standard error >= min_t_statistic),
//    (b) the fitted growth over the window exceeds tolerance_bytes, and (c) the means of
//    `segments` consecutive groups of the window strictly increase. (a) rejects a loop whose
//    memory oscillates, (c) a one-off step (a cache filled once) that a line would also fit.
// 2. Survivors (allocator level, through track()). Blocks allocated during a call and still
//    alive at the end of that call are followed across later calls of the same name; one alive
//    at both ends of min_survived_calls later calls is a survivor. Survivors are grouped by
//    allocation site -- the allocating stack when a HistoryRecorder records stacks, else the
//    requested size -- and a site is suspected when its survivors come from min_leaking_calls
//    distinct calls: a steady leak adds survivors every call, while lazy initialisation (one
//    call) and k-buffering (each block outlives fewer than min_survived_calls later calls) do not.
//    Blocks are identified by address and size: a block freed and another allocated at the
//    same address and size between two calls is taken for the same block.
// A call seen twice -- track() around a profiled call whose result is also observe()d -- is one
// point: points of a name whose time intervals overlap are the same call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"
#include "gpumemprof/profiler/profile_result.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct LeakDetectorOptions {
  /// Calls of a name (after warm-up) needed before its growth is judged.
  std::size_t min_calls = 8;
  /// The newest calls the growth fit uses.
  std::size_t window = 64;
  /// First calls of each name left out of the fit (lazy initialisation, cache warm-up).
  std::size_t warmup_calls = 1;
  /// Significance the slope needs: slope / standard error of the slope.
  double min_t_statistic = 4.0;
  /// Fitted growth over the window (bytes) at or below which growth is noise.
  std::int64_t tolerance_bytes = 0;
  /// Consecutive groups of the window whose means must strictly increase (>= 2).
  std::size_t segments = 4;
  /// Later calls a block must stay alive through to count as a survivor.
  std::size_t min_survived_calls = 4;
  /// Distinct calls a site's survivors must come from for the site to be suspected.
  std::size_t min_leaking_calls = 3;
  /// Blocks followed per name at most (the oldest are kept).
  std::size_t max_followed_blocks = 100'000;
};

/// The growth verdict for one name.
struct MemoryGrowth {
  std::string name;
  std::uint64_t calls = 0;         ///< calls observed
  std::uint64_t calls_fitted = 0;  ///< calls in the fit
  double slope = 0.0;              ///< bytes per call
  double t_statistic = 0.0;        ///< slope / its standard error (infinity for an exact line)
  std::int64_t growth = 0;         ///< fitted growth over the fitted calls, bytes
  bool leak_suspected = false;
  std::string reason;  ///< the verdict in words
};

/// Blocks from one allocation site that outlived the calls that made them.
struct SurvivingAllocations {
  std::string name;                ///< the function or scope
  std::string site;                ///< the allocation site in words
  std::uint64_t context = 0;       ///< history context of the first block (0 when history records none)
  std::size_t requested_size = 0;  ///< bytes, when grouped by request size (no stack recorded)
  std::uint64_t blocks = 0;
  std::int64_t bytes = 0;        ///< block bytes
  std::uint64_t calls = 0;       ///< distinct calls the blocks came from
  std::uint64_t first_call = 0;  ///< index (0-based) of the earliest such call
  std::uint64_t last_call = 0;
  std::vector<std::uintptr_t> addresses;  ///< up to 8, oldest first
  /// The allocation stack when history records stacks (see MemorySource::frames_of).
  Frames frames;
  bool leak_suspected = false;  ///< calls >= min_leaking_calls (else: retained, e.g. lazily initialised)
};

struct LeakReport {
  std::vector<MemoryGrowth> growth;
  std::vector<SurvivingAllocations> survivors;

  [[nodiscard]] bool leak_suspected() const noexcept {
    return std::any_of(growth.begin(), growth.end(), [](const auto& g) { return g.leak_suspected; }) ||
           std::any_of(survivors.begin(), survivors.end(), [](const auto& s) { return s.leak_suspected; });
  }

  /// The report in words, one line per name and per survivor site.
  [[nodiscard]] std::string format() const {
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
};

inline std::ostream& operator<<(std::ostream& os, const LeakReport& r) { return os << r.format(); }

namespace detail {

/// Least-squares fit of y against 0..n-1.
struct LineFit {
  double slope = 0.0;
  double t_statistic = 0.0;
};

[[nodiscard]] inline LineFit fit_line(const std::deque<std::int64_t>& y) {
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
[[nodiscard]] inline bool segment_means_increase(const std::deque<std::int64_t>& y, std::size_t segments) {
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

/// An allocated block at one instant.
struct LiveBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  std::uint64_t context = 0;
  friend bool operator<(const LiveBlock& a, const LiveBlock& b) noexcept {
    return a.address != b.address ? a.address < b.address : a.size < b.size;
  }
  [[nodiscard]] bool same_block(const LiveBlock& o) const noexcept { return address == o.address && size == o.size; }
};

[[nodiscard]] inline std::vector<LiveBlock> live_blocks(const MemorySource& source) {
  std::vector<LiveBlock> out;
  for (const SegmentView& seg : source.segments()) {
    for (const BlockView& b : seg.blocks) {
      if (b.state == BlockState::active_allocated) out.push_back({b.address, b.size, b.requested_size, b.context});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

[[nodiscard]] inline bool contains(const std::vector<LiveBlock>& sorted, const LiveBlock& b) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), b);
  return it != sorted.end() && it->same_block(b);
}

}  // namespace detail

class LeakDetector;

/// One tracked call (from LeakDetector::track); ends when destroyed or end()ed.
class LeakCall {
 public:
  LeakCall(const LeakCall&) = delete;
  LeakCall& operator=(const LeakCall&) = delete;
  ~LeakCall() {
    try {
      end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  /// Ends the call now (idempotent).
  void end();

 private:
  friend class LeakDetector;
  LeakCall(LeakDetector& detector, std::string_view name);

  LeakDetector* detector_;
  std::string name_;
  double began_;  // seconds since the Unix epoch
  std::vector<detail::LiveBlock> at_entry_;
};

class LeakDetector {
 public:
  /// A detector reading `source` for track(); with nullptr only observe()/add_point() work.
  explicit LeakDetector(std::shared_ptr<MemorySource> source = nullptr, LeakDetectorOptions options = {})
      : source_(std::move(source)), options_(options) {}
  /// A detector over `allocator`, which must outlive it.
  template <DeviceBackend B>
  explicit LeakDetector(CachingAllocator<B>& allocator, LeakDetectorOptions options = {})
      : LeakDetector(make_memory_source(allocator), options) {}

  /// Starts a tracked call of `name`: the live blocks now are remembered; at its end the blocks
  /// allocated during it that are still alive are followed, and allocated bytes become a point
  /// of the growth series. Needs a source.
  [[nodiscard]] LeakCall track(std::string_view name) { return LeakCall(*this, name); }

  /// Adds a profiled call's memory_after to the growth series of its name; a call that a
  /// track() of the same name enclosed (or was enclosed by) counts once.
  void observe(const ProfileResult& result) {
    const std::int64_t after = result.allocator_level ? result.memory_after.allocated_memory
                                                      : result.memory_after.device_used_memory.value_or(0);
    const double begin = result.memory_before.timestamp;
    const double end = result.memory_after.timestamp;
    std::lock_guard lock(mutex_);
    add_point_locked(state(result.name), after,
                     begin > 0 && end >= begin ? std::optional<Interval>(Interval{begin, end}) : std::nullopt);
  }
  void observe(const std::vector<ProfileResult>& results) {
    for (const auto& r : results) observe(r);
  }
  /// Adds one point (bytes in use after a call of `name`) to its growth series.
  void add_point(std::string_view name, std::int64_t bytes_after) {
    std::lock_guard lock(mutex_);
    add_point_locked(state(name), bytes_after, std::nullopt);
  }

  [[nodiscard]] LeakReport report() const {
    std::lock_guard lock(mutex_);
    LeakReport r;
    for (const auto& [name, st] : names_) {
      r.growth.push_back(judge_growth(name, st));
      add_survivors(name, st, r.survivors);
    }
    return r;
  }

  /// Forgets every name.
  void clear() {
    std::lock_guard lock(mutex_);
    names_.clear();
  }

  [[nodiscard]] const LeakDetectorOptions& options() const noexcept { return options_; }

 private:
  friend class LeakCall;

  struct Followed {
    detail::LiveBlock block;
    std::uint64_t call = 0;      // the call that allocated it
    std::uint64_t survived = 0;  // later calls it was alive through
  };
  /// When a call ran: seconds since the Unix epoch (MemorySnapshot::timestamp's clock).
  struct Interval {
    double begin = 0.0;
    double end = 0.0;
  };
  struct NameState {
    std::uint64_t calls = 0;
    std::deque<Interval> seen;        // the newest calls' intervals, where known (kSeenCalls at most)
    bool last_in_series = false;      // the newest point is series.back() (not a warm-up call)
    std::deque<std::int64_t> series;  // newest `window` points after warm-up
    std::vector<Followed> followed;
    std::uint64_t tracked_calls = 0;  // calls through track() (index of survivors)
  };

  NameState& state(std::string_view name) {
    auto it = names_.find(name);
    if (it == names_.end()) it = names_.emplace(std::string(name), NameState{}).first;
    return it->second;
  }

  static constexpr std::size_t kSeenCalls = 4096;

  void add_point_locked(NameState& st, std::int64_t bytes_after, std::optional<Interval> when) {
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

  std::vector<detail::LiveBlock> live_now() const {
    if (source_ == nullptr) throw std::logic_error("LeakDetector::track needs a memory source");
    return detail::live_blocks(*source_);
  }

  void end_call(std::string_view name, const std::vector<detail::LiveBlock>& at_entry, double began) {
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

  [[nodiscard]] MemoryGrowth judge_growth(const std::string& name, const NameState& st) const {
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
    const double growth = fit.slope * static_cast<double>(st.series.size() - 1);
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

  void add_survivors(const std::string& name, const NameState& st, std::vector<SurvivingAllocations>& out) const {
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
      const Frame* site = user_frame(frames);  // the one rule (analysis/user_frame.hpp)
      const std::string key = site != nullptr
                                  ? "line " + site->filename + ':' + std::to_string(site->line) + ' ' + site->name
                              : b.context != 0 ? "context " + std::to_string(b.context)
                                               : "size " + std::to_string(b.requested);
      SurvivingAllocations& s = sites[key];
      if (s.blocks == 0) {
        s.name = name;
        s.context = b.context;
        s.requested_size = frames == nullptr && b.context == 0 ? b.requested : 0;
        s.first_call = f.call;
        s.frames = frames;
        s.site = site != nullptr
                     ? frame_label(*site)
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

  std::shared_ptr<MemorySource> source_;
  LeakDetectorOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, NameState, std::less<>> names_;
};

inline LeakCall::LeakCall(LeakDetector& detector, std::string_view name)
    : detector_(&detector),
      name_(name),
      began_(detail::wall_seconds(std::chrono::steady_clock::now())),
      at_entry_(detector.live_now()) {}

inline void LeakCall::end() {
  if (detector_ == nullptr) return;
  std::exchange(detector_, nullptr)->end_call(name_, at_entry_, began_);
}

GPUMEMPROF_NAMESPACE_END
