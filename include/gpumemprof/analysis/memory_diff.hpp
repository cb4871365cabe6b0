// Analysis layer: two runs compared -- by allocation site (the user's frame of each stack) and by
// profiled scope. Every figure is named for what it is, in PyTorch's words: allocated = block
// bytes (allocated_bytes), requested = the bytes asked for (requested_bytes).
//
// From a snapshot: the run's peak allocated bytes by the one definition (snapshot_peak_allocated:
// the block bytes the trace recorded); from the trace, the peaks of reserved bytes and of requested bytes live at
// once -- for the run the timeline's requested level (analysis/timeline.hpp, memory allocated
// before a late trace included), for each site the same rule from the trace alone -- and the
// allocation counts; from the segments, the
// requested bytes live at the end. A snapshot without a trace has its live blocks as its peak
// and counts them as allocations. Devices are summed.
// From a profile (export_profile JSON; the CLI reads it, this layer reads no files): each
// scope's peak allocated bytes (the highest peak_memory_usage() of its calls), its net change
// summed over its calls (memory_diff()), its calls and allocations; the run's peak and the
// allocated bytes when the profile was written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Bytes and counts of one site, one scope or the whole run; which fields a row has depends on
/// what it came from (see the file comment).
struct UsageCounts {
  /// Peak allocated (block) bytes: the run, and profile scopes; nullopt where unknown (site
  /// rows, a trace that cannot be replayed).
  std::optional<std::uint64_t> peak_allocated_bytes;
  std::uint64_t peak_requested_bytes = 0;   ///< snapshots: most requested bytes live at once
  std::uint64_t peak_reserved_bytes = 0;    ///< snapshots (the run): most segment bytes at once, by the trace
  std::int64_t live_requested_bytes = 0;    ///< snapshots: requested bytes live at the end
  std::int64_t allocated_at_end_bytes = 0;  ///< profiles (the run): allocated bytes when written
  std::int64_t net_change_bytes = 0;        ///< profile scopes: memory_diff() summed over the calls
  std::uint64_t allocations = 0;
  std::uint64_t calls = 0;  ///< profile scopes
};

/// What one run used.
struct MemoryUsage {
  bool from_profile = false;  ///< a profile JSON (scopes), else a snapshot (sites)
  UsageCounts total;
  std::map<std::string, UsageCounts> sites;
  std::map<std::string, UsageCounts> scopes;
  std::uint64_t unmatched_frees = 0;  ///< trace frees of blocks allocated before it started
  std::string peak_allocated_note;    ///< why total.peak_allocated_bytes is unknown
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
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    // The run's peak is the timeline's requested level (active: down at free_completed), the
    // reading every report shares; the sites follow the same rule.
    const TraceTimeline<S> timeline(snap, static_cast<int>(d));
    struct Live {
      std::uint64_t bytes;
      UsageCounts* site;
      std::uint64_t* site_live;
    };
    std::unordered_map<std::uint64_t, Live> live;
    std::unordered_map<UsageCounts*, std::uint64_t> site_live;
    std::int64_t peak = timeline.start().requested;
    std::int64_t peak_reserved = timeline.start().reserved;
    timeline.walk([&](std::size_t, const auto& e, const TimelineLevels& level, const auto&) {
      peak = std::max(peak, level.requested);
      peak_reserved = std::max(peak_reserved, level.reserved);
      if (e.action == TraceAction::alloc) {
        any_trace = true;
        UsageCounts& site = site_for(e.frames);
        ++site.allocations;
        ++u.total.allocations;
        std::uint64_t& sl = site_live[&site];
        sl += e.size;
        site.peak_requested_bytes = std::max(site.peak_requested_bytes, sl);
        live[e.addr] = Live{e.size, &site, &sl};
      } else if (e.action == TraceAction::free_completed) {
        auto it = live.find(e.addr);
        if (it == live.end()) {
          ++u.unmatched_frees;
          return;
        }
        *it->second.site_live -= it->second.bytes;
        live.erase(it);
      }
    });
    if (!timeline.trace().empty()) {
      u.total.peak_requested_bytes += static_cast<std::uint64_t>(peak);
      u.total.peak_reserved_bytes += static_cast<std::uint64_t>(peak_reserved);
    }
  }
  for (const SnapshotSegment& seg : snap.segments) {
    for (const SnapshotBlock& b : seg.blocks) {
      if (b.state != BlockState::active_allocated) continue;
      UsageCounts& site = u.sites[user_frame_label(b.frames)];
      site.live_requested_bytes += static_cast<std::int64_t>(b.requested_size);
      u.total.live_requested_bytes += static_cast<std::int64_t>(b.requested_size);
      if (!any_trace) {
        site.peak_requested_bytes += b.requested_size;
        ++site.allocations;
        ++u.total.allocations;
      }
    }
  }
  if (!any_trace) u.total.peak_requested_bytes = static_cast<std::uint64_t>(u.total.live_requested_bytes);
  // The run's peak allocated bytes by the one definition, summed over the devices.
  std::set<int> devices;
  for (const int d : traced_devices(snap)) devices.insert(d);
  for (const SnapshotSegment& seg : snap.segments) devices.insert(seg.device);
  std::uint64_t peak_allocated = 0;
  for (const int d : devices) {
    std::string why;
    const std::optional<std::uint64_t> p = snapshot_peak_allocated(snap, d, &why);
    if (!p) {
      u.peak_allocated_note = "device " + std::to_string(d) + ": " + why;
      return u;
    }
    peak_allocated += *p;
  }
  u.total.peak_allocated_bytes = peak_allocated;
  return u;
}

/// One row of a comparison: a site or scope in A, in B, or in both.
struct UsageDelta {
  std::string key;
  bool in_a = false;
  bool in_b = false;
  UsageCounts a;
  UsageCounts b;
  /// Sites: the change of peak requested bytes; scopes: of peak allocated bytes.
  [[nodiscard]] std::int64_t peak_change() const noexcept {
    auto peak = [](const UsageCounts& c) {
      return static_cast<std::int64_t>(c.peak_allocated_bytes.value_or(c.peak_requested_bytes));
    };
    return peak(b) - peak(a);
  }
};

struct MemoryDiff {
  bool profiles = false;  ///< two profiles (scopes), else two snapshots (sites)
  UsageCounts a;
  UsageCounts b;
  std::vector<UsageDelta> sites;   ///< largest peak change (either sign) first, then by key
  std::vector<UsageDelta> scopes;  ///< same order
  std::string note;                ///< why a peak allocated figure is unknown
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

/// The comparison of two runs of the same kind (two snapshots or two profiles).
[[nodiscard]] inline MemoryDiff diff_usage(const MemoryUsage& a, const MemoryUsage& b) {
  MemoryDiff d{a.from_profile,
               a.total,
               b.total,
               detail::diff_tables(a.sites, b.sites),
               detail::diff_tables(a.scopes, b.scopes),
               {}};
  if (!a.peak_allocated_note.empty()) d.note = "A: " + a.peak_allocated_note;
  if (!b.peak_allocated_note.empty()) d.note += (d.note.empty() ? "B: " : "; B: ") + b.peak_allocated_note;
  return d;
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
  auto count_row = [&](const char* what, std::uint64_t x, std::uint64_t y) {
    std::snprintf(buf, sizeof buf, "%-18s %14llu %14llu  %+lld\n", what, static_cast<unsigned long long>(x),
                  static_cast<unsigned long long>(y), static_cast<long long>(y) - static_cast<long long>(x));
    out += buf;
  };
  auto size_row = [&](const char* what, std::int64_t x, std::int64_t y) {
    std::snprintf(buf, sizeof buf, "%-18s %14s %14s  %s%s\n", what, format_signed_size(x).c_str(),
                  format_signed_size(y).c_str(), format_size_change(y - x).c_str(),
                  pct(static_cast<double>(x), static_cast<double>(y)).c_str());
    out += buf;
  };
  std::snprintf(buf, sizeof buf, "%-18s %14s %14s  %s\n", "", "A", "B", "change");
  out += buf;
  if (d.a.peak_allocated_bytes && d.b.peak_allocated_bytes) {
    size_row("peak allocated", static_cast<std::int64_t>(*d.a.peak_allocated_bytes),
             static_cast<std::int64_t>(*d.b.peak_allocated_bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%-18s %14s %14s  (%s)\n", "peak allocated",
                  d.a.peak_allocated_bytes ? format_size(*d.a.peak_allocated_bytes).c_str() : "n/a",
                  d.b.peak_allocated_bytes ? format_size(*d.b.peak_allocated_bytes).c_str() : "n/a", d.note.c_str());
    out += buf;
  }
  if (d.profiles) {
    size_row("allocated at end", d.a.allocated_at_end_bytes, d.b.allocated_at_end_bytes);
    count_row("calls", d.a.calls, d.b.calls);
  } else {
    size_row("peak requested", static_cast<std::int64_t>(d.a.peak_requested_bytes),
             static_cast<std::int64_t>(d.b.peak_requested_bytes));
    size_row("requested at end", d.a.live_requested_bytes, d.b.live_requested_bytes);
  }
  count_row("allocations", d.a.allocations, d.b.allocations);

  auto table = [&](const char* what, const char* explained, const std::vector<UsageDelta>& rows) {
    std::size_t added = 0, gone = 0, changed = 0;
    for (const UsageDelta& r : rows) {
      added += r.in_a ? 0 : 1;
      gone += r.in_b ? 0 : 1;
      const bool same = r.peak_change() == 0 && r.a.allocations == r.b.allocations &&
                        r.a.live_requested_bytes == r.b.live_requested_bytes &&
                        r.a.net_change_bytes == r.b.net_change_bytes && r.a.calls == r.b.calls;
      changed += r.in_a && r.in_b && !same ? 1 : 0;
    }
    std::snprintf(buf, sizeof buf,
                  "%s: %zu in A, %zu in B; %zu new, %zu vanished, %zu changed (largest peak change first)\n", what,
                  rows.size() - added, rows.size() - gone, added, gone, changed);
    out += buf;
    if (rows.empty()) return;
    out += std::string("  ") + explained + "\n";
    if (d.profiles) {
      std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %8s %8s %9s %9s  %s\n", "", "peak A", "peak B",
                    "change", "net A", "net B", "calls A", "calls B", "allocs A", "allocs B", "scope");
    } else {
      std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %9s %9s  %s\n", "", "peak A", "peak B", "change",
                    "at end A", "at end B", "allocs A", "allocs B", "site");
    }
    out += buf;
    for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
      const UsageDelta& r = rows[i];
      const char* mark = !r.in_a ? "new" : !r.in_b ? "vanished" : "";
      const UsageCounts& x = r.a;
      const UsageCounts& y = r.b;
      const auto peak = [&](const UsageCounts& c) {
        return format_size(d.profiles ? c.peak_allocated_bytes.value_or(0) : c.peak_requested_bytes);
      };
      if (d.profiles) {
        std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %8llu %8llu %9llu %9llu  %s\n", mark,
                      peak(x).c_str(), peak(y).c_str(), format_size_change(r.peak_change()).c_str(),
                      format_size_change(x.net_change_bytes).c_str(), format_size_change(y.net_change_bytes).c_str(),
                      static_cast<unsigned long long>(x.calls), static_cast<unsigned long long>(y.calls),
                      static_cast<unsigned long long>(x.allocations), static_cast<unsigned long long>(y.allocations),
                      r.key.c_str());
      } else {
        std::snprintf(buf, sizeof buf, "  %-9s %12s %12s %12s %12s %12s %9llu %9llu  %s\n", mark, peak(x).c_str(),
                      peak(y).c_str(), format_size_change(r.peak_change()).c_str(),
                      format_signed_size(x.live_requested_bytes).c_str(),
                      format_signed_size(y.live_requested_bytes).c_str(),
                      static_cast<unsigned long long>(x.allocations), static_cast<unsigned long long>(y.allocations),
                      r.key.c_str());
      }
      out += buf;
    }
    if (rows.size() > top) out += "  ... " + std::to_string(rows.size() - top) + " more\n";
  };
  if (!d.profiles) {
    table("sites", "requested bytes: peak = most live at once during the trace, at end = live at the end", d.sites);
  } else {
    table("scopes",
          "peak = the highest allocated bytes during a call (absolute); net = allocated minus freed bytes, summed over "
          "the calls",
          d.scopes);
  }
  return out;
}

GPUMEMPROF_NAMESPACE_END
