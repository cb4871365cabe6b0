// Analysis layer: the training steps of a device's trace and how memory moves from step to step.
//
// Where the steps come from:
//   annotations -- ranges named as steps ("step 3", "ProfilerStep#3" from torch.profiler,
//                  "train_step", "iteration 7"; not "optimizer.step"), in the order they began;
//                  an entry belongs to the step whose range holds it: by the recorder's order
//                  (Annotation::trace_index) where the snapshot keeps it, else by its time;
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
#include <functional>
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
  std::stable_sort(steps.begin(), steps.end(), began_before);
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
  std::string name;               ///< the annotation's name, or "step N" when detected
  std::int64_t start_us = 0;      ///< the range's start, or the time of the step's first entry
  std::int64_t end_us = 0;        ///< the range's end, or the time of the step's last entry
  std::size_t entries = 0;        ///< trace entries in the step
  std::size_t first_entry = 0;    ///< the device trace's index of its first entry
  std::size_t end_entry = 0;      ///< one past its last entry (first_entry when it has none)
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

/// For each alloc entry of `trace` in order: its key (requested size and stack content), ids
/// from 0 in order of first appearance.
template <class Trace>
std::vector<std::uint32_t> allocation_keys(const Trace& trace, std::vector<std::size_t>& entry_of_alloc) {
  struct PairHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint32_t>& k) const noexcept {
      return std::hash<std::uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
    }
  };
  std::unordered_map<const void*, std::uint32_t> stack_of_pointer;
  std::unordered_map<std::string, std::uint32_t> stack_ids;  // by content: equal stacks may be distinct objects
  std::unordered_map<std::pair<std::uint64_t, std::uint32_t>, std::uint32_t, PairHash> key_ids;
  std::vector<std::uint32_t> keys;
  std::size_t i = 0;
  const void* last_frames = nullptr;  // consecutive entries often share one stack
  std::uint32_t last_stack = 0;
  for (const auto& e : trace) {
    if (e.action == TraceAction::alloc) {
      const Frames& f = e.frames;
      std::uint32_t stack = 0;
      if (f && f.get() == last_frames) {
        stack = last_stack;
      } else if (f) {
        const auto [it, added] = stack_of_pointer.try_emplace(f.get(), 0);
        if (added) {
          std::string content;
          for (const Frame& frame : *f) content += frame.filename + '\n' + std::to_string(frame.line) + '\n' + frame.name + '\n';
          it->second = stack_ids.try_emplace(std::move(content), static_cast<std::uint32_t>(stack_ids.size() + 1)).first->second;
        }
        stack = last_stack = it->second;
        last_frames = f.get();
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
  // Each key's positions, in one flat array (a counting sort): ids are dense from 0.
  std::uint32_t n_keys = 0;
  for (const std::uint32_t k : keys) n_keys = std::max(n_keys, k + 1);
  std::vector<std::uint32_t> offset(static_cast<std::size_t>(n_keys) + 1, 0);
  for (const std::uint32_t k : keys) ++offset[k + 1];
  for (std::size_t k = 0; k < n_keys; ++k) offset[k + 1] += offset[k];
  std::vector<std::uint32_t> flat(keys.size());
  {
    std::vector<std::uint32_t> next(offset.begin(), offset.end() - 1);
    for (std::uint32_t i = 0; i < keys.size(); ++i) flat[next[keys[i]]++] = i;
  }
  // Candidates seen most often first, then the earliest (ids are in order of first appearance).
  std::vector<std::uint32_t> order;
  for (std::uint32_t k = 0; k < n_keys; ++k) {
    if (offset[k + 1] - offset[k] >= 3) order.push_back(k);
  }
  std::stable_sort(order.begin(), order.end(), [&offset](std::uint32_t a, std::uint32_t b) {
    return offset[a + 1] - offset[a] > offset[b + 1] - offset[b];
  });
  std::vector<std::uint32_t> gaps;
  for (const std::uint32_t k : order) {
    const std::uint32_t* pos = flat.data() + offset[k];
    const std::size_t count = offset[k + 1] - offset[k];
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (std::size_t j = 2; j < count; ++j) {  // the first gap may differ
      lo = std::min(lo, pos[j] - pos[j - 1]);
      hi = std::max(hi, pos[j] - pos[j - 1]);
    }
    if (lo < 2 || hi > 1.1 / 0.9 * lo) continue;  // cannot all lie within 10% of their median
    gaps.assign(count - 2, 0);
    for (std::size_t j = 2; j < count; ++j) gaps[j - 2] = pos[j] - pos[j - 1];
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
    const double median = gaps[gaps.size() / 2];
    // The first step may run longer (state created once); the last one no longer than a step
    // (a key that repeats only during setup would otherwise make the whole run its last step).
    const auto tail = static_cast<double>(keys.size() - pos[count - 1]);
    if (lo < 0.9 * median || hi > 1.1 * median || pos[1] - pos[0] < 0.9 * median || tail > 1.5 * median) continue;
    period = static_cast<std::size_t>(median);
    return {pos, pos + count};
  }
  return {};
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
    std::size_t i = 0;
    for (const auto& e : trace) {
      // The last range begun at or before the entry (in the recorder's order where the snapshot
      // keeps it), if it still runs then.
      const auto it = std::partition_point(ranges.begin(), ranges.end(), [&](const AnnotatedRange& a) {
        return a.ordered() ? a.i0 <= static_cast<std::int64_t>(i) : a.t0 <= e.time_us;
      });
      const bool inside = it != ranges.begin() && std::prev(it)->holds(i, e.time_us);
      step_of.push_back(inside ? static_cast<std::int32_t>(std::prev(it) - ranges.begin()) : -1);
      ++i;
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
  live_site.reserve(1024);
  const void* last_stack = nullptr;
  std::size_t last_site = 0;
  std::vector<bool> seen(r.steps.size(), false);
  std::int64_t before = timeline.start().requested_in_use;
  timeline.walk([&](std::size_t i, const auto& e, const TimelineLevels& after, const std::vector<std::int64_t>&) {
    const std::int32_t k = step_of[i];
    if (k >= 0) {
      StepFacts& s = r.steps[static_cast<std::size_t>(k)];
      if (!seen[static_cast<std::size_t>(k)]) {
        seen[static_cast<std::size_t>(k)] = true;
        s.start_bytes = s.peak_bytes = before;
        s.first_entry = i;
        if (r.source == StepSource::detected) s.start_us = e.time_us;
      }
      ++s.entries;
      s.end_entry = i + 1;
      s.peak_bytes = std::max(s.peak_bytes, after.requested_in_use);
      s.end_bytes = after.requested_in_use;
      if (r.source == StepSource::detected || ranges[static_cast<std::size_t>(k)].open()) s.end_us = e.time_us;
    }
    before = after.requested_in_use;
    std::size_t site = 0;
    if (e.action == TraceAction::alloc) {
      const Frames& f = e.frames;
      if (f.get() != last_stack || site_labels.empty()) {  // consecutive entries often share one stack
        const auto [it, added] = site_of_stack.try_emplace(f.get(), site_labels.size());
        if (added) {
          site_labels.push_back(user_frame_label(f));
          site_steps.emplace_back(r.steps.size(), 0);
        }
        last_stack = f.get();
        last_site = it->second;
      }
      site = last_site;
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
  std::int64_t held = timeline.start().requested_in_use;
  std::size_t next_entry = 0;
  for (std::size_t k = 0; k < r.steps.size(); ++k) {
    StepFacts& s = r.steps[k];
    if (!seen[k]) {
      s.start_bytes = s.peak_bytes = s.end_bytes = held;
      s.first_entry = s.end_entry =
          k < ranges.size() && ranges[k].ordered() ? static_cast<std::size_t>(ranges[k].i0) : next_entry;
    }
    next_entry = s.end_entry;
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
