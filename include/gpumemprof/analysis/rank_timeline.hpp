// Analysis layer: one rank's memory over its run, small enough to draw many ranks on one axis
// (the cross-rank page, export/reports/html_ranks_report.hpp), and the axis that aligns them.
//
// RankTimeline: the levels of the rank's trace (analysis/timeline.hpp, the one reading of a trace:
// requested bytes held -- alloc to free_requested -- and reserved bytes) cut into at most
// `max_points` equal time buckets, each keeping its highest level of each kind, so the peaks
// survive any reduction; and the rank's steps (analysis/steps.hpp: annotated ranges named as
// steps, else the repeating allocation pattern). Holds no reference to the snapshot: a report
// over 64 ranks keeps 64 of these, and one snapshot at a time.
//
// StepAxis: x = k at the start of step k on every rank, linear in time inside each step (a step
// ends where the next begins, or at the last step's end). Before the first step and after the
// last, time is squeezed into at most half a unit each side (a lead-in as long as one median step
// takes a third of a unit; one of 140 steps, as a DDP run's start-up, still under half): the steps
// own the axis. So step k of every rank starts at the same x whatever each rank's speed, and the
// ranks' memory in step k lines up.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/analysis/steps.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One time bucket of a RankTimeline (bytes).
struct RankTimelinePoint {
  std::int64_t time_us = 0;           ///< the bucket's first entry (µs since the epoch, as the trace says)
  std::int64_t requested_in_use = 0;  ///< the most requested bytes in use (alloc to free requested)
  std::int64_t reserved = 0;          ///< the most reserved bytes in the bucket
};

/// One rank's run, reduced (see the file comment).
struct RankTimeline {
  int device = -1;  ///< the device whose trace it reads (the longest trace); -1: no trace
  std::int64_t first_us = 0;
  std::int64_t last_us = 0;
  std::vector<RankTimelinePoint> points;  ///< in time order; the first holds the level before the trace
  TimelineLevels peaks;                   ///< exact, over the whole trace
  StepSource steps_from = StepSource::none;
  std::vector<StepFacts> steps;
  [[nodiscard]] bool has_trace() const noexcept { return device >= 0; }
};

/// The device of `snap` with the longest trace, or -1 when no device has one.
template <SnapshotLike S>
[[nodiscard]] int longest_trace_device(const S& snap) {
  int best = -1;
  std::size_t most = 0;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    const auto n = static_cast<std::size_t>(snap.device_traces[d].size());
    if (n > most) {
      most = n;
      best = static_cast<int>(d);
    }
  }
  return best;
}

/// `snap`'s run reduced to at most `max_points` points (at least 2; see the file comment).
template <SnapshotLike S>
[[nodiscard]] RankTimeline rank_timeline(const S& snap, std::size_t max_points = 2000) {
  RankTimeline r;
  r.device = longest_trace_device(snap);
  if (r.device < 0) return r;
  max_points = std::max<std::size_t>(max_points, 2);
  const TraceTimeline<S> timeline(snap, r.device);
  const auto& trace = timeline.trace();
  r.first_us = (*trace.begin()).time_us;
  r.last_us = r.first_us;
  for (const auto& e : trace) r.last_us = std::max(r.last_us, e.time_us);
  // Bucket b covers [first + b * span / n, first + (b + 1) * span / n); times that go back stay
  // in the current bucket (the trace's clock is not always monotonic across threads).
  const double per_us = static_cast<double>(max_points) / static_cast<double>(r.last_us - r.first_us + 1);
  const TimelineLevels start = timeline.start();
  r.peaks = start;
  r.points.push_back({r.first_us, start.requested_in_use, start.reserved});
  std::size_t bucket = 0;
  timeline.walk([&](std::size_t, const auto& e, const TimelineLevels& l, const auto&) {
    const auto b =
        std::min(max_points - 1, static_cast<std::size_t>(static_cast<double>(e.time_us - r.first_us) * per_us));
    if (b > bucket) {
      bucket = b;
      r.points.push_back({e.time_us, l.requested_in_use, l.reserved});
    }
    RankTimelinePoint& p = r.points.back();
    p.requested_in_use = std::max(p.requested_in_use, l.requested_in_use);
    p.reserved = std::max(p.reserved, l.reserved);
    r.peaks.requested_in_use = std::max(r.peaks.requested_in_use, l.requested_in_use);
    r.peaks.requested = std::max(r.peaks.requested, l.requested);
    r.peaks.reserved = std::max(r.peaks.reserved, l.reserved);
  });
  StepReport steps = analyze_steps(snap, r.device);
  r.steps_from = steps.source;
  r.steps = std::move(steps.steps);
  return r;
}

/// The step-aligned x of one rank's times (see the file comment).
class StepAxis {
 public:
  /// `steps` in order of their start; without steps, x is the time in µs from 0.
  explicit StepAxis(const std::vector<StepFacts>& steps) {
    for (const StepFacts& s : steps)
      knots_.push_back(knots_.empty() ? s.start_us : std::max(knots_.back(), s.start_us));
    if (!steps.empty()) knots_.push_back(std::max(knots_.back(), steps.back().end_us));
    std::vector<std::int64_t> lengths;
    for (std::size_t k = 0; k + 1 < knots_.size(); ++k) {
      if (knots_[k + 1] > knots_[k]) lengths.push_back(knots_[k + 1] - knots_[k]);
    }
    if (!lengths.empty()) {
      std::nth_element(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2),
                       lengths.end());
      unit_us_ = static_cast<double>(lengths[lengths.size() / 2]);
    }
    if (knots_.empty()) knots_.push_back(0);
  }

  /// The x of time `t_us`.
  [[nodiscard]] double operator()(std::int64_t t_us) const {
    const auto n = static_cast<double>(knots_.size() - 1);
    if (knots_.size() == 1) return static_cast<double>(t_us - knots_.front()) / unit_us_;  // no steps: time
    if (t_us < knots_.front()) return -squeeze(static_cast<double>(knots_.front() - t_us) / unit_us_);
    if (t_us >= knots_.back()) return n + squeeze(static_cast<double>(t_us - knots_.back()) / unit_us_);
    // The last knot at or before t: its next knot lies after t, so the step has a length.
    const auto k = static_cast<std::size_t>(std::upper_bound(knots_.begin(), knots_.end(), t_us) - knots_.begin()) - 1;
    return static_cast<double>(k) +
           static_cast<double>(t_us - knots_[k]) / static_cast<double>(knots_[k + 1] - knots_[k]);
  }

  /// The widest the time before the first step (or after the last) is drawn, in steps.
  static constexpr double kOutside = 0.5;
  /// `steps` median steps outside the steps, as x: about as many while few, never kOutside.
  [[nodiscard]] static double squeeze(double steps) { return kOutside * steps / (steps + kOutside); }

  /// The x where step `k` (of the steps given) ends: at most k + 1.
  [[nodiscard]] double step_end(const std::vector<StepFacts>& steps, std::size_t k) const {
    const std::int64_t length = knots_[k + 1] - knots_[k];
    if (length <= 0) return static_cast<double>(k);
    const double inside = static_cast<double>(steps[k].end_us - knots_[k]) / static_cast<double>(length);
    return static_cast<double>(k) + std::clamp(inside, 0.0, 1.0);
  }

 private:
  std::vector<std::int64_t> knots_;  // start of each step, then the last step's end
  double unit_us_ = 1.0;             // µs per x outside the steps
};

GPUMEMPROF_NAMESPACE_END
