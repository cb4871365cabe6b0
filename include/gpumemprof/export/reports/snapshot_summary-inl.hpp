// Layer 5: the snapshot summary's bodies (snapshot_summary.hpp declares them). Included by that
// header in header-only mode; compiled once in the library (lib/reports.cpp, summarize for
// Snapshot and CompactSnapshot) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on
// its own.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <SnapshotLike S>
SnapshotSummary summarize(const S& snap) {
  SnapshotSummary s;
  std::map<const std::vector<Frame>*, std::size_t> by_stack;  // shared Frames: one key per stack
  for (const SnapshotSegment& seg : snap.segments) {
    ++s.segments;
    ++(seg.is_large ? s.large_segments : s.small_segments);
    s.expandable_segments += seg.is_expandable ? 1 : 0;
    s.usage += segment_facts(seg);
    auto pool =
        std::find_if(s.pools.begin(), s.pools.end(), [&seg](const PoolUsage& p) { return p.id == seg.pool_id; });
    if (pool == s.pools.end()) pool = s.pools.insert(pool, PoolUsage{seg.pool_id});
    ++pool->segments;
    pool->reserved += seg.total_size;
    pool->allocated += seg.allocated_size;
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state != BlockState::active_allocated) continue;
      auto [it, fresh] = by_stack.emplace(b.frames.get(), s.sites.size());
      if (fresh) s.sites.push_back(SiteUsage{b.frames, 0, 0, 0});
      SiteUsage& site = s.sites[it->second];
      site.live_bytes += b.size;
      site.requested_bytes += b.requested_size;
      ++site.blocks;
    }
  }
  std::stable_sort(s.sites.begin(), s.sites.end(),
                   [](const SiteUsage& a, const SiteUsage& b) { return a.live_bytes > b.live_bytes; });
  for (const auto& trace : snap.device_traces) {
    for (const auto& e : trace) ++s.trace_actions[static_cast<std::size_t>(e.action)];
  }
  s.annotations = snap.external_annotations.size();
  return s;
}

GPUMEMPROF_FUNC std::string format_summary(const SnapshotSummary& s, std::size_t top) {
  std::string out;
  char buf[512];
  const SegmentFacts& u = s.usage;
  auto pct = [](std::uint64_t part, std::uint64_t whole) {
    return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  };
  std::snprintf(buf, sizeof buf, "segments: %llu (%llu large, %llu small, %llu expandable), reserved %s\n",
                static_cast<unsigned long long>(s.segments), static_cast<unsigned long long>(s.large_segments),
                static_cast<unsigned long long>(s.small_segments),
                static_cast<unsigned long long>(s.expandable_segments), format_size(u.reserved).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "blocks: %llu live (%s requested), %llu pending free, %llu free\n",
                static_cast<unsigned long long>(u.live_blocks), format_size(u.requested).c_str(),
                static_cast<unsigned long long>(u.pending_blocks), static_cast<unsigned long long>(u.free_blocks));
  out += buf;
  std::snprintf(buf, sizeof buf,
                "fragmentation: external %s (1 - largest free block / free bytes), internal %s (%.1f%% of "
                "reserved: rounding inside live blocks)\n",
                format_fraction(u.external_fragmentation()).c_str(), format_size(u.internal_free()).c_str(),
                pct(u.internal_free(), u.reserved));
  out += buf;
  std::snprintf(buf, sizeof buf, "free: %s in %llu %s (%.1f%% of reserved), largest free block %s; %s pending free\n",
                format_size(u.free).c_str(), static_cast<unsigned long long>(u.free_blocks),
                plural(u.free_blocks, "block").c_str(), pct(u.free, u.reserved), format_size(u.largest_free).c_str(),
                format_size(u.pending).c_str());
  out += buf;
  std::string actions;
  for (std::size_t a = 0; a < s.trace_actions.size(); ++a) {
    if (s.trace_actions[a] == 0) continue;
    actions += (actions.empty() ? "" : ", ") + std::to_string(s.trace_actions[a]) + " " +
               to_string(static_cast<TraceAction>(a));
  }
  // Per pool, when any segment is in a private pool (a CUDA graph's or a MemPool's).
  if (s.pools.size() > 1 || (s.pools.size() == 1 && !s.pools[0].id.is_default())) {
    for (const PoolUsage& p : s.pools) {
      std::snprintf(buf, sizeof buf, "pool (%llu, %llu)%s: %s reserved in %llu %s, %s allocated\n",
                    static_cast<unsigned long long>(p.id.first), static_cast<unsigned long long>(p.id.second),
                    p.id.is_default() ? " default" : (p.id.first != 0 ? " graph" : " user"),
                    format_size(p.reserved).c_str(), static_cast<unsigned long long>(p.segments),
                    plural(p.segments, "segment").c_str(), format_size(p.allocated).c_str());
      out += buf;
    }
  }
  out += "trace: " + (actions.empty() ? std::string("no entries") : actions) + "; " + std::to_string(s.annotations) +
         " " + plural(s.annotations, "annotation") + "\n";
  if (top == 0) return out;  // --top 0: no sites asked for, no heading
  out += "top allocation sites by live bytes:\n";
  if (s.sites.empty()) out += "  (no live allocations)\n";
  for (std::size_t i = 0; i < s.sites.size() && i < top; ++i) {
    const SiteUsage& site = s.sites[i];
    const std::string where = user_frame_label(site.frames);
    std::snprintf(buf, sizeof buf, "  %2zu. %12s in %6llu %-6s  %s\n", i + 1, format_size(site.live_bytes).c_str(),
                  static_cast<unsigned long long>(site.blocks), plural(site.blocks, "block").c_str(), where.c_str());
    out += buf;
  }
  return out;
}

GPUMEMPROF_NAMESPACE_END
