// Analysis layer: the training steps of a device's trace and how memory moves from step to step.
//
// Where the steps come from:
//   annotations -- ranges named as steps ("step 3", "ProfilerStep#3" from torch.profiler,
//                  "train_step", "iteration 7"; not "optimizer.step"), in time order; an entry
//                  belongs to the step whose range holds its time;
//   detected    -- without such ranges, the repeating allocation pattern: an allocation "key"
//                  (requested size and stack) that recurs at a steady spacing (every gap after the
//                  first within 10% of their median, at least 2 allocations, at least 3 times,
//                  and no more than 1.5 medians of allocations after its last time) opens each
//                  step; of several, the one seen most often, then the earliest. A step
//                  runs from one opening allocation to the entry before the next; the last step
//                  runs to the end of the trace, and entries before the first step belong to none.
//
// Per step, on the timeline's allocated level (analysis/timeline.hpp: requested bytes held, down
// at free_requested): the peak (the level at the step's start included), the bytes held at its
// end, and the growth over the previous step's end (the first step: over its start). A growing
// site is an allocation site (the user's frame of the allocation's stack, analysis/user_frame.hpp)
// whose held bytes rise in every step after the first: a leak shows up as one, with its bytes
// per step.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/analysis/annotated_ranges.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// A training step's range: "step 3", "ProfilerStep#3" (torch.profiler), "train_step",
/// "iteration 7"; not "optimizer.step" (a scope inside a step).
[[nodiscard]] inline bool names_a_step(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("optimizer") != std::string::npos) return false;
  const auto starts = [&lower](std::string_view p) { return lower.rfind(p, 0) == 0; };
  return starts("step") || starts("profilerstep") || starts("iteration") ||
         lower.find("train_step") != std::string::npos || lower.find("training_step") != std::string::npos;
}

}  // namespace detail

/// The annotated ranges of `device` named as steps, in order of their start.
[[nodiscard]] inline std::vector<AnnotatedRange> annotated_steps(const std::vector<Annotation>& annotations,
                                                                   int device) {
  std::vector<AnnotatedRange> steps;
  for (AnnotatedRange& r : annotated_ranges(annotations, device)) {
    if (detail::names_a_step(r.name)) steps.push_back(std::move(r));
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const AnnotatedRange& a, const AnnotatedRange& b) { return a.t0 < b.t0; });
  return steps;
}

enum class StepSource : std::uint8_t { none, annotations, detected };

[[nodiscard]] constexpr const char* to_string(StepSource s) noexcept {
  switch (s) {
    case StepSource::annotations: return "annotations";
    case StepSource::detected: return "detected";
    case StepSource::none: return "none";
  }
  return "none";
}

/// One step (bytes are requested bytes held: the timeline's allocated level).
struct StepFacts {
  std::string name;             ///< the annotation's name, or "step N" when detected
  std::int64_t start_us = 0;    ///< the range's start, or the time of the step's first entry
  std::int64_t end_us = 0;      ///< the range's end, or the time of the step's last entry
  std::size_t entries = 0;      ///< trace entries in the step
  std::int64_t start_bytes = 0;   ///< held when the step began
  std::int64_t peak_bytes = 0;    ///< the most held during the step (its start included)
  std::int64_t end_bytes = 0;     ///< held at its end
  std::int64_t growth_bytes = 0;  ///< end_bytes minus the previous step's (the first: minus start_bytes)
};

/// An allocation site whose held bytes rise in every step after the first.
struct SiteGrowth {
  std::string site;                   ///< user_frame_label() of the allocations' stack
  std::vector<std::int64_t> per_step; ///< net change of the site's held bytes in each step
  std::int64_t total = 0;             ///< the sum over the steps after the first
};

struct StepReport {
  int device = 0;
  StepSource source = StepSource::none;
  std::size_t period = 0;  ///< detected: allocations per step (the median spacing)
  std::vector<StepFacts> steps;
  std::vector<SiteGrowth> growing_sites;  ///< largest total first
};

namespace detail {

/// For each alloc entry of `trace` in order: its key (requested size and stack content).
template <class Trace>
std::vector<std::uint32_t> allocation_keys(const Trace& trace, std::vector<std::size_t>& entry_of_alloc) {
  std::unordered_map<const void*, std::uint32_t> stack_of_pointer;
  std::unordered_map<std::string, std::uint32_t> stack_ids;  // by content: equal stacks may be distinct objects
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint32_t> key_ids;
  std::vector<std::uint32_t> keys;
  std::size_t i = 0;
  for (const auto& e : trace) {
    if (e.action == TraceAction::alloc) {
      const Frames& f = e.frames;
      std::uint32_t stack = 0;
      if (f) {
        const auto [it, added] = stack_of_pointer.try_emplace(f.get(), 0);
        if (added) {
          std::string content;
          for (const Frame& frame : *f) content += frame.filename + '\n' + std::to_string(frame.line) + '\n' + frame.name + '\n';
          it->second = stack_ids.try_emplace(std::move(content), static_cast<std::uint32_t>(stack_ids.size() + 1)).first->second;
        }
        stack = it->second;
      }
      keys.push_back(key_ids.try_emplace({e.size, stack}, static_cast<std::uint32_t>(key_ids.size())).first->second);
      entry_of_alloc.push_back(i);
    }
    ++i;
  }
  return keys;
}

/// The alloc ordinals that open each step (see the header comment); empty when nothing repeats.
inline std::vector<std::uint32_t> step_openings(const std::vector<std::uint32_t>& keys, std::size_t& period) {
  std::vector<std::vector<std::uint32_t>> positions;
  for (std::uint32_t i = 0; i < keys.size(); ++i) {
    if (keys[i] >= positions.size()) positions.resize(keys[i] + 1);
    positions[keys[i]].push_back(i);
  }
  const std::vector<std::uint32_t>* best = nullptr;
  for (const auto& pos : positions) {
    if (pos.size() < 3) continue;
    std::vector<std::uint32_t> gaps;
    for (std::size_t j = 2; j < pos.size(); ++j) gaps.push_back(pos[j] - pos[j - 1]);  // the first gap may differ
    std::vector<std::uint32_t> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (median < 2) continue;
    const bool steady = std::all_of(gaps.begin(), gaps.end(), [median](std::uint32_t g) {
      return g >= 0.9 * median && g <= 1.1 * median;
    });
    // The first step may run longer (state created once); the last one no longer than a step
    // (a key that repeats only during setup would otherwise make the whole run its last step).
    const auto tail = static_cast<double>(keys.size() - pos.back());
    if (!steady || pos[1] - pos[0] < 0.9 * median || tail > 1.5 * median) continue;
    if (best == nullptr || pos.size() > best->size() || (pos.size() == best->size() && pos[0] < best->front())) {
      best = &pos;
      period = static_cast<std::size_t>(median);
    }
  }
  return best == nullptr ? std::vector<std::uint32_t>{} : *best;
}

}  // namespace detail

/// The steps of `device`'s trace in `snap` (see the header comment).
template <SnapshotLike S>
[[nodiscard]] StepReport analyze_steps(const S& snap, int device) {
  StepReport r;
  r.device = device;
  const TraceTimeline<S> timeline(snap, device);
  const auto& trace = timeline.trace();
  // Which step each entry belongs to (-1: none).
  std::vector<std::int32_t> step_of;
  step_of.reserve(static_cast<std::size_t>(trace.size()));
  const std::vector<AnnotatedRange> ranges = annotated_steps(snap.external_annotations, device);
  if (!ranges.empty()) {
    r.source = StepSource::annotations;
    for (const AnnotatedRange& a : ranges) r.steps.push_back(StepFacts{a.name, a.t0, a.open() ? a.t0 : a.t1});
    for (const auto& e : trace) {
      // The last range starting at or before the entry, if it still runs then.
      const auto it = std::upper_bound(ranges.begin(), ranges.end(), e.time_us,
                                       [](std::int64_t t, const AnnotatedRange& a) { return t < a.t0; });
      const bool inside = it != ranges.begin() && e.time_us < std::prev(it)->t1;
      step_of.push_back(inside ? static_cast<std::int32_t>(std::prev(it) - ranges.begin()) : -1);
    }
  } else {
    std::vector<std::size_t> entry_of_alloc;
    const std::vector<std::uint32_t> openings =
        detail::step_openings(detail::allocation_keys(trace, entry_of_alloc), r.period);
    if (openings.empty()) return r;
    r.source = StepSource::detected;
    step_of.assign(static_cast<std::size_t>(trace.size()), -1);
    for (std::size_t k = 0; k < openings.size(); ++k) {
      const std::size_t from = entry_of_alloc[openings[k]];
      const std::size_t to = k + 1 < openings.size() ? entry_of_alloc[openings[k + 1]] : step_of.size();
      std::fill(step_of.begin() + static_cast<std::ptrdiff_t>(from), step_of.begin() + static_cast<std::ptrdiff_t>(to),
                static_cast<std::int32_t>(k));
      r.steps.push_back(StepFacts{"step " + std::to_string(k)});
    }
  }
  // One walk: levels per step, and each site's held bytes per step.
  std::unordered_map<const void*, std::size_t> site_of_stack;  // stack pointer -> site index
  std::vector<std::string> site_labels;
  std::vector<std::vector<std::int64_t>> site_steps;  // site -> net change per step
  std::unordered_map<std::uint64_t, std::size_t> live_site;  // address -> site of the live allocation
  std::vector<bool> seen(r.steps.size(), false);
  std::int64_t before = timeline.start().allocated;
  timeline.walk([&](std::size_t i, const auto& e, const TimelineLevels& after, const std::vector<std::int64_t>&) {
    const std::int32_t k = step_of[i];
    if (k >= 0) {
      StepFacts& s = r.steps[static_cast<std::size_t>(k)];
      if (!seen[static_cast<std::size_t>(k)]) {
        seen[static_cast<std::size_t>(k)] = true;
        s.start_bytes = s.peak_bytes = before;
        if (r.source == StepSource::detected) s.start_us = e.time_us;
      }
      ++s.entries;
      s.peak_bytes = std::max(s.peak_bytes, after.allocated);
      s.end_bytes = after.allocated;
      if (r.source == StepSource::detected || ranges[static_cast<std::size_t>(k)].open()) s.end_us = e.time_us;
    }
    before = after.allocated;
    std::size_t site = 0;
    if (e.action == TraceAction::alloc) {
      const Frames& f = e.frames;
      const auto [it, added] = site_of_stack.try_emplace(f.get(), site_labels.size());
      if (added) {
        site_labels.push_back(user_frame_label(f));
        site_steps.emplace_back(r.steps.size(), 0);
      }
      site = it->second;
      live_site[e.addr] = site;
    } else if (e.action == TraceAction::free_requested) {
      const auto it = live_site.find(e.addr);
      if (it == live_site.end()) return;  // allocated before the trace: no site known
      site = it->second;
      live_site.erase(it);
    } else {
      return;
    }
    if (k < 0) return;
    const auto n = static_cast<std::int64_t>(e.size);
    site_steps[site][static_cast<std::size_t>(k)] += e.action == TraceAction::alloc ? n : -n;
  });
  // Steps without entries hold what the one before ended with.
  std::int64_t held = timeline.start().allocated;
  for (std::size_t k = 0; k < r.steps.size(); ++k) {
    StepFacts& s = r.steps[k];
    if (!seen[k]) s.start_bytes = s.peak_bytes = s.end_bytes = held;
    s.growth_bytes = s.end_bytes - (k == 0 ? s.start_bytes : r.steps[k - 1].end_bytes);
    held = s.end_bytes;
  }
  // Sites by label (several stacks may share the user's frame), growing in every step after the first.
  std::map<std::string, std::vector<std::int64_t>> by_label;
  for (std::size_t i = 0; i < site_labels.size(); ++i) {
    auto& sum = by_label.try_emplace(site_labels[i], r.steps.size(), 0).first->second;
    for (std::size_t k = 0; k < r.steps.size(); ++k) sum[k] += site_steps[i][k];
  }
  if (r.steps.size() >= 2) {
    for (auto& [label, per_step] : by_label) {
      if (!std::all_of(per_step.begin() + 1, per_step.end(), [](std::int64_t v) { return v > 0; })) continue;
      SiteGrowth g{label, per_step, 0};
      for (std::size_t k = 1; k < per_step.size(); ++k) g.total += per_step[k];
      r.growing_sites.push_back(std::move(g));
    }
  }
  std::stable_sort(r.growing_sites.begin(), r.growing_sites.end(),
                   [](const SiteGrowth& a, const SiteGrowth& b) { return a.total > b.total; });
  return r;
}

GPUMEMPROF_NAMESPACE_END
