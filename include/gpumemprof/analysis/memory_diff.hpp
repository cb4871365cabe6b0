// Analysis layer: two runs compared -- by allocation site (the user's frame of each stack) and by
// profiled scope: peak, live at the end, allocation counts, sites that are new or gone.
//
// From a snapshot: the trace gives each site's peak (its own highest live requested bytes) and
// allocation count, and the whole run's peak; the segments give the live bytes at the end
// (active_allocated blocks, requested bytes). A snapshot without a trace has peak = live at the
// end and counts its live blocks as allocations. Devices are summed. Profiles (export_profile
// JSON) fill the scope table; the CLI reads them (this layer reads no files).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Bytes and counts of one site, one scope or the whole run.
struct UsageCounts {
  std::uint64_t peak_bytes = 0;
  std::int64_t live_at_end_bytes = 0;  ///< scopes: net bytes their calls left allocated
  std::uint64_t allocations = 0;
  std::uint64_t calls = 0;  ///< scopes only
};

/// What one run used.
struct MemoryUsage {
  UsageCounts total;
  std::map<std::string, UsageCounts> sites;
  std::map<std::string, UsageCounts> scopes;
  std::uint64_t unmatched_frees = 0;  ///< trace frees of blocks allocated before it started
};

/// Works on a Snapshot and on a streamed CompactSnapshot alike.
template <SnapshotLike S>
[[nodiscard]] MemoryUsage usage_from_snapshot(const S& snap) {
  MemoryUsage u;
  bool any_trace = false;
  // A site's label per distinct stack: both snapshot kinds share one frames list between entries.
  std::unordered_map<const void*, UsageCounts*> site_of;
  auto site_for = [&](const Frames& frames) -> UsageCounts& {
    auto [it, added] = site_of.try_emplace(frames.get(), nullptr);
    if (added) it->second = &u.sites[user_frame_label(frames)];
    return *it->second;
  };
  for (const auto& trace : snap.device_traces) {
    struct Live {
      std::uint64_t bytes;
      UsageCounts* site;
      std::uint64_t* site_live;
    };
    std::unordered_map<std::uint64_t, Live> live;
    std::unordered_map<UsageCounts*, std::uint64_t> site_live;
    std::uint64_t total = 0;
    std::uint64_t peak = 0;
    for (const auto& e : trace) {
      if (e.action == TraceAction::alloc) {
        any_trace = true;
        UsageCounts& site = site_for(e.frames);
        ++site.allocations;
        ++u.total.allocations;
        std::uint64_t& sl = site_live[&site];
        sl += e.size;
        site.peak_bytes = std::max(site.peak_bytes, sl);
        live[e.addr] = Live{e.size, &site, &sl};
        total += e.size;
        peak = std::max(peak, total);
      } else if (e.action == TraceAction::free_completed) {
        auto it = live.find(e.addr);
        if (it == live.end()) {
          ++u.unmatched_frees;
          continue;
        }
        *it->second.site_live -= it->second.bytes;
        total -= it->second.bytes;
        live.erase(it);
      }
    }
    u.total.peak_bytes += peak;
  }
  for (const SnapshotSegment& seg : snap.segments) {
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state != BlockState::active_allocated) continue;
      UsageCounts& site = u.sites[user_frame_label(b.frames)];
      site.live_at_end_bytes += static_cast<std::int64_t>(b.requested_size);
      u.total.live_at_end_bytes += static_cast<std::int64_t>(b.requested_size);
      if (!any_trace) {
        site.peak_bytes += b.requested_size;
        ++site.allocations;
        ++u.total.allocations;
      }
    }
  }
  if (!any_trace) u.total.peak_bytes = static_cast<std::uint64_t>(u.total.live_at_end_bytes);
  return u;
}

/// One row of a comparison: a site or scope in A, in B, or in both.
struct UsageDelta {
  std::string key;
  bool in_a = false;
  bool in_b = false;
  UsageCounts a;
  UsageCounts b;
  [[nodiscard]] std::int64_t peak_change() const noexcept {
    return static_cast<std::int64_t>(b.peak_bytes) - static_cast<std::int64_t>(a.peak_bytes);
  }
};

struct MemoryDiff {
  UsageCounts a;
  UsageCounts b;
  std::vector<UsageDelta> sites;   ///< largest peak change (either sign) first, then by key
  std::vector<UsageDelta> scopes;  ///< same order
};

namespace detail {
inline std::vector<UsageDelta> diff_tables(const std::map<std::string, UsageCounts>& a,
                                           const std::map<std::string, UsageCounts>& b) {
  std::map<std::string, UsageDelta> rows;
  for (const auto& [k, v] : a) rows[k] = UsageDelta{k, true, false, v, {}};
  for (const auto& [k, v] : b) {
    UsageDelta& d = rows[k];
    d.key = k;
    d.in_b = true;
    d.b = v;
  }
  std::vector<UsageDelta> out;
  for (auto& [k, d] : rows) out.push_back(std::move(d));
  std::stable_sort(out.begin(), out.end(), [](const UsageDelta& x, const UsageDelta& y) {
    const auto ax = x.peak_change() < 0 ? -x.peak_change() : x.peak_change();
    const auto ay = y.peak_change() < 0 ? -y.peak_change() : y.peak_change();
    return ax > ay;
  });
  return out;
}
}  // namespace detail

[[nodiscard]] inline MemoryDiff diff_usage(const MemoryUsage& a, const MemoryUsage& b) {
  return MemoryDiff{a.total, b.total, detail::diff_tables(a.sites, b.sites), detail::diff_tables(a.scopes, b.scopes)};
}

/// "+64.00 MiB", "-512 bytes", "0 bytes".
[[nodiscard]] inline std::string format_size_change(std::int64_t change) {
  if (change == 0) return "0 bytes";
  const std::uint64_t mag = change < 0 ? static_cast<std::uint64_t>(-change) : static_cast<std::uint64_t>(change);
  return (change < 0 ? "-" : "+") + format_size(mag);
}

/// The comparison as text: totals, then at most `top` rows of each table.
[[nodiscard]] inline std::string format_diff(const MemoryDiff& d, std::size_t top = 20) {
  std::string out;
  char buf[1024];
  auto pct = [](double from, double to) {
    char p[32];
    if (from == 0) return std::string();
    std::snprintf(p, sizeof p, " (%+.1f%%)", (to - from) * 100.0 / from);
    return std::string(p);
  };
  std::snprintf(buf, sizeof buf, "%-12s %14s %14s  %s\n", "", "A", "B", "change");
  out += buf;
  std::snprintf(buf, sizeof buf, "%-12s %14s %14s  %s%s\n", "peak", format_size(d.a.peak_bytes).c_str(),
                format_size(d.b.peak_bytes).c_str(),
                format_size_change(static_cast<std::int64_t>(d.b.peak_bytes - d.a.peak_bytes)).c_str(),
                pct(static_cast<double>(d.a.peak_bytes), static_cast<double>(d.b.peak_bytes)).c_str());
  out += buf;
  auto signed_size = [](std::int64_t v) {
    return v < 0 ? "-" + format_size(static_cast<std::uint64_t>(-v)) : format_size(static_cast<std::uint64_t>(v));
  };
  std::snprintf(buf, sizeof buf, "%-12s %14s %14s  %s\n", "live at end", signed_size(d.a.live_at_end_bytes).c_str(),
                signed_size(d.b.live_at_end_bytes).c_str(),
                format_size_change(d.b.live_at_end_bytes - d.a.live_at_end_bytes).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "%-12s %14llu %14llu  %+lld\n", "allocations",
                static_cast<unsigned long long>(d.a.allocations), static_cast<unsigned long long>(d.b.allocations),
                static_cast<long long>(d.b.allocations) - static_cast<long long>(d.a.allocations));
  out += buf;
  auto table = [&](const char* what, const char* one, const std::vector<UsageDelta>& rows) {
    std::size_t added = 0, gone = 0, changed = 0;
    for (const UsageDelta& r : rows) {
      added += r.in_a ? 0 : 1;
      gone += r.in_b ? 0 : 1;
      changed += r.in_a && r.in_b &&
                         (r.peak_change() != 0 || r.a.allocations != r.b.allocations ||
                          r.a.live_at_end_bytes != r.b.live_at_end_bytes)
                     ? 1
                     : 0;
    }
    std::snprintf(buf, sizeof buf,
                  "%s: %zu in A, %zu in B; %zu new, %zu vanished, %zu changed (largest peak change first)\n", what,
                  rows.size() - added, rows.size() - gone, added, gone, changed);
    out += buf;
    if (rows.empty()) return;
    std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %9s %9s  %s\n", "", "peak A", "peak B", "change",
                  "live A", "live B", "allocs A", "allocs B", one);
    out += buf;
    for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
      const UsageDelta& r = rows[i];
      const char* mark = !r.in_a ? "new" : !r.in_b ? "vanished" : "";
      std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %9llu %9llu  %s\n", mark,
                    format_size(r.a.peak_bytes).c_str(), format_size(r.b.peak_bytes).c_str(),
                    format_size_change(r.peak_change()).c_str(), signed_size(r.a.live_at_end_bytes).c_str(),
                    signed_size(r.b.live_at_end_bytes).c_str(), static_cast<unsigned long long>(r.a.allocations),
                    static_cast<unsigned long long>(r.b.allocations), r.key.c_str());
      out += buf;
    }
    if (rows.size() > top) out += "  ... " + std::to_string(rows.size() - top) + " more\n";
  };
  if (!d.sites.empty() || d.scopes.empty()) table("sites", "site", d.sites);
  if (!d.scopes.empty()) table("scopes", "scope", d.scopes);
  return out;
}

GPUMEMPROF_NAMESPACE_END
