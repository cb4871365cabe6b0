// Analysis layer: the moment of a time window when a device's trace held the most, and the
// allocations live at that moment, grouped by site -- what made a peak, rather than what is
// live when someone looks later (the budget matchers of testing/catch2.hpp name these).
//
// The level is the timeline's allocated level (analysis/timeline.hpp: requested bytes held,
// down at free_requested); the moment is the first entry inside [t0_us, t1_us] after which it
// is highest. Live then: the trace's allocations not yet freed, plus those made before the trace
// (blocks still live at its end that it never allocates, and addresses it frees before it ever
// allocates them, until that free). A site is the user's frame of the allocation's stack
// (analysis/user_frame.hpp); allocations made inside the window and those held from before it
// are separate groups.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Live allocations of one site at the peak.
struct PeakSite {
  std::string site;         ///< user_frame_label() of their stack
  std::uint64_t bytes = 0;  ///< requested bytes live at the peak
  std::size_t blocks = 0;   ///< allocations
  bool in_window = false;   ///< made inside the window (else held from before it)
};

struct PeakMoment {
  bool found = false;           ///< false: no trace entry lies inside the window
  std::int64_t time_us = 0;     ///< when the peak was reached
  std::int64_t held_bytes = 0;  ///< the level then (requested bytes held)
  std::vector<PeakSite> sites;  ///< those made in the window first, then largest first
};

/// The peak of `device`'s trace inside [t0_us, t1_us] and what was live then (see the file comment).
template <SnapshotLike S>
[[nodiscard]] PeakMoment peak_moment(const S& snap, int device, std::int64_t t0_us, std::int64_t t1_us) {
  PeakMoment m;
  const TraceTimeline<S> timeline(snap, device);
  std::size_t peak = 0;
  std::size_t first_inside = 0;
  timeline.walk([&](std::size_t i, const auto& e, const TimelineLevels& after, const auto&) {
    if (e.time_us < t0_us || e.time_us > t1_us) return;
    if (!m.found) first_inside = i;
    if (!m.found || after.requested_in_use > m.held_bytes) {
      m.found = true;
      m.held_bytes = after.requested_in_use;
      m.time_us = e.time_us;
      peak = i;
    }
  });
  if (!m.found) return m;

  struct Live {
    std::uint64_t bytes = 0;
    Frames frames;
    bool in_window = false;
  };
  std::unordered_map<std::uint64_t, Live> live;  // address -> allocation live at the peak
  std::unordered_map<std::uint64_t, bool> seen;  // addresses the trace allocates or frees
  std::size_t i = 0;
  for (const auto& e : timeline.trace()) {
    if (e.action == TraceAction::alloc) {
      seen.try_emplace(e.addr, true);
      if (i <= peak) live[e.addr] = Live{e.size, e.frames, i >= first_inside};
    } else if (e.action == TraceAction::free_requested) {
      const auto [it, first_time] = seen.try_emplace(e.addr, true);
      if (first_time && i > peak) live[e.addr] = Live{e.size, e.frames, false};  // made before the trace
      if (i <= peak) live.erase(e.addr);
    }
    ++i;
  }
  for (const SnapshotSegment& seg : snap.segments) {  // live throughout, made before the trace
    if (seg.device != device) continue;
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state == BlockState::active_allocated && !seen.contains(b.address))
        live[b.address] = Live{b.requested_size, b.frames, false};
    }
  }
  std::map<std::pair<bool, std::string>, PeakSite> by_site;
  for (const auto& [addr, l] : live) {
    const std::string label = user_frame_label(l.frames);
    PeakSite& s = by_site[{l.in_window, label}];
    s.site = label;
    s.in_window = l.in_window;
    s.bytes += l.bytes;
    ++s.blocks;
  }
  for (auto& [key, s] : by_site) m.sites.push_back(std::move(s));
  std::stable_sort(m.sites.begin(), m.sites.end(), [](const PeakSite& a, const PeakSite& b) {
    return a.in_window != b.in_window ? a.in_window : a.bytes > b.bytes;
  });
  return m;
}

GPUMEMPROF_NAMESPACE_END
