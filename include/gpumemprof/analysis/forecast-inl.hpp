// Analysis layer: forecast_peak()'s bodies (forecast.hpp declares them and describes the method).
// Included by that header in header-only mode; compiled once in the library (lib/analysis.cpp)
// for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/forecast.hpp"
#include "gpumemprof/analysis/forecast_rules.hpp"
#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/analysis/size_model.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/analysis/stream_alignment.hpp"
#include "gpumemprof/analysis/trace_start.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

inline std::string forecast_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  return buf;
}

/// Whether three sizes at parameters p[0] < p[1] < p[2] grow as k*(p - c)^2: their square roots
/// rise on a line (the third within size_close of the line through the first two's).
inline bool square_of_line(const double* p, const std::uint64_t* s) noexcept {
  const double r0 = std::sqrt(static_cast<double>(s[0])), r1 = std::sqrt(static_cast<double>(s[1]));
  const double r2 = r1 + (r1 - r0) * (p[2] - p[1]) / (p[1] - p[0]);
  return r1 > r0 && size_close(static_cast<double>(s[2]), r2 * r2);
}

/// The reference's trace with each request at `sizes[k]` (its frees too); oom entries dropped
/// (the replay would retry them), everything else as recorded.
inline CompactSnapshot forecast_target(const CompactSnapshot& ref, int device,
                                       const std::vector<std::uint64_t>& sizes) {
  CompactSnapshot out;
  out.allocator_settings = ref.allocator_settings;
  out.device_traces.resize(static_cast<std::size_t>(device) + 1);
  CompactTrace& trace = out.device_traces[static_cast<std::size_t>(device)];
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // address -> target size
  std::size_t k = 0;
  TraceEntry t;
  for (const CompactTrace::Entry e : ref.device_traces[static_cast<std::size_t>(device)]) {
    if (e.action == TraceAction::oom) continue;
    t.action = e.action;
    t.addr = e.addr;
    t.size = e.size;
    t.stream = e.stream;
    t.time_us = e.time_us;
    t.frames = e.frames;
    t.compile_context = e.compile_context;
    t.user_metadata = e.user_metadata;
    if (e.action == TraceAction::alloc) {
      t.size = sizes[k++];
      live[e.addr] = t.size;
    } else if (e.action == TraceAction::free_requested || e.action == TraceAction::free_completed) {
      if (const auto it = live.find(e.addr); it != live.end()) {
        t.size = it->second;
        if (e.action == TraceAction::free_completed) live.erase(it);
      }
    }
    trace.push_back(t);
  }
  return out;
}

/// The most requested bytes live at once in `target`'s trace.
inline std::uint64_t target_peak_requested(const CompactSnapshot& target, int device);

/// Replays `target` on a device of `capacity` bytes; 0: a device large enough never to refuse
/// (four times the peak requested bytes, at least 80 GiB, doubled while the replay runs short).
inline SnapshotReplayResult forecast_replay_once(const CompactSnapshot& target, int device,
                                                 const AllocatorConfig& config, std::size_t capacity) {
  SnapshotReplayOptions opt;
  opt.config = config;
  opt.capacity = capacity;
  if (capacity != 0) return replay_snapshot(target, device, opt);
  opt.capacity =
      std::max<std::size_t>(std::size_t{80} << 30, 4 * target_peak_requested(target, device) + (std::size_t{1} << 30));
  for (;;) {
    SnapshotReplayResult r = replay_snapshot(target, device, opt);
    if (r.new_ooms == 0 || opt.capacity >= (std::size_t{1} << 46)) return r;
    opt.capacity *= 2;
  }
}

/// Walks `target`'s trace keeping the requested bytes live; returns the most and the index of the
/// entry after which they were live.
inline std::pair<std::uint64_t, std::size_t> requested_peak(const CompactSnapshot& target, int device) {
  std::uint64_t live = 0, best = 0;
  std::size_t at = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> sizes;
  const CompactTrace& trace = target.device_traces[static_cast<std::size_t>(device)];
  for (std::size_t k = 0; k < trace.size(); ++k) {
    const CompactTrace::Entry e = trace[k];
    if (e.action == TraceAction::alloc) {
      sizes[e.addr] = e.size;
      live += e.size;
      if (live > best) {
        best = live;
        at = k;
      }
    } else if (e.action == TraceAction::free_completed) {
      if (const auto it = sizes.find(e.addr); it != sizes.end()) {
        live -= it->second;
        sizes.erase(it);
      }
    }
  }
  return {best, at};
}

inline std::uint64_t target_peak_requested(const CompactSnapshot& target, int device) {
  return requested_peak(target, device).first;
}

inline std::vector<ForecastGroup> top_groups(std::map<std::string, ForecastGroup>& groups, std::size_t n) {
  std::vector<ForecastGroup> out;
  for (auto& [label, g] : groups) {
    g.label = label;
    out.push_back(g);
  }
  std::stable_sort(out.begin(), out.end(), [](const ForecastGroup& a, const ForecastGroup& b) {
    return a.bytes_at_target > b.bytes_at_target;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

inline std::string divergence_text(const RequestStream& ref, const StreamDivergence& d) {
  const std::size_t req = std::min(d.ref_begin, ref.requests.empty() ? 0 : ref.requests.size() - 1);
  std::string s = "request " + std::to_string(d.ref_begin);
  if (!ref.requests.empty()) s += " (trace entry " + std::to_string(ref.requests[req].alloc_event) + ")";
  s += ": " + std::to_string(d.ref_end - d.ref_begin) + " request(s) only in the reference, " +
       std::to_string(d.other_end - d.other_begin) + " only in the other probe";
  if (!ref.requests.empty() && ref.requests[req].site != 0) s += ", near " + ref.site_labels.at(ref.requests[req].site);
  return s;
}

/// "9 request(s) (no stack) of 73.5 MiB, 132 MiB at sizes 8, 16: 483 MiB at 64 by the fit, 132 MiB if
/// they stop growing, 528 MiB if they grow on".
inline std::string uncertain_text(const ForecastUncertain& g, const std::vector<ForecastProbe>& probes) {
  std::string s = std::to_string(g.requests) + " request(s)";
  s += g.site.empty() ? " (no stack" : " (at " + g.site;
  s += g.category.empty() ? ")" : ", " + g.category + ")";
  std::string sizes, at;
  for (std::size_t k = 0; k < g.size_at_probes.size(); ++k) {
    if (g.size_at_probes[k] == 0) continue;
    sizes += (sizes.empty() ? "" : ", ") + format_size(g.size_at_probes[k]);
    at += (at.empty() ? "" : ", ") + forecast_size_text(probes[k].parameter);
  }
  // Only fitted sizes are "by the fit": the others are the largest probe's, kept.
  const char* basis = g.unmatched     ? " each at the target (kept: no other probe made them), "
                      : g.implausible ? " each at the target (kept: their sizes shrank or outgrew the square law, "
                                        "which no size law gives), "
                                      : " each at the target by the fit, ";
  s += " of " + sizes + " at size(s) " + at + (g.unmatched ? " (only in the largest probe)" : "") + ": " +
       format_size(g.size_at_target) + basis + format_size(g.size_if_kept) + " if they stop growing, " +
       format_size(g.size_if_grown) + " if they grow on";
  return s;
}

}  // namespace detail

GPUMEMPROF_FUNC ForecastResult forecast_peak(const std::vector<ForecastProbe>& probes, double at,
                                             const ForecastOptions& options) {
  if (probes.size() < 2 || probes.size() > 3) {
    throw ForecastError("a forecast needs 2 or 3 probes (runs of the program at smaller sizes), got " +
                        std::to_string(probes.size()));
  }
  std::vector<std::size_t> order(probes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return probes[a].parameter < probes[b].parameter; });
  for (const ForecastProbe& p : probes) {
    if (p.snapshot == nullptr) throw ForecastError(p.name + ": no snapshot given");
    if (!(p.parameter > 0) || !std::isfinite(p.parameter)) {
      throw ForecastError(p.name + ": the probe's size must be a positive number, got " +
                          forecast_size_text(p.parameter));
    }
  }
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const ForecastProbe& a = probes[order[k]];
    const ForecastProbe& b = probes[order[k + 1]];
    if (b.parameter - a.parameter <= 1e-9 * b.parameter) {
      throw ForecastError(a.name + " and " + b.name + " are both at size " + forecast_size_text(a.parameter) +
                          ": the probes must be runs at different sizes");
    }
  }
  const std::size_t ri = order.back();
  const ForecastProbe& refp = probes[ri];
  if (!(at > refp.parameter) || !std::isfinite(at)) {
    throw ForecastError("the target size " + forecast_size_text(at) + " must be larger than every probe's (" +
                        forecast_size_text(refp.parameter) + "): a forecast extrapolates from smaller runs");
  }

  // The request streams.
  std::vector<RequestStream> streams(probes.size());
  for (std::size_t k = 0; k < probes.size(); ++k) {
    const ForecastProbe& p = probes[k];
    const int device = options.device >= 0 ? options.device : busiest_device(*p.snapshot);
    if (device < 0 || static_cast<std::size_t>(device) >= p.snapshot->device_traces.size() ||
        p.snapshot->device_traces[static_cast<std::size_t>(device)].empty()) {
      throw ForecastError(p.name +
                          ": no trace events to forecast from; record the run with "
                          "torch.cuda.memory._record_memory_history() from its start");
    }
    ReplaySeed seed;
    (void)detail::reconstruct_start(*p.snapshot, device, seed);
    if (seed.any()) {
      throw ForecastError(p.name + ": its history starts mid-run (" + std::to_string(seed.segments) + " segment(s), " +
                          std::to_string(seed.blocks) +
                          " live block(s) existed before its first event); start "
                          "torch.cuda.memory._record_memory_history() before the model is created");
    }
    streams[k] = request_stream(*p.snapshot, device);
    if (streams[k].requests.empty()) throw ForecastError(p.name + ": its trace has no allocations");
  }
  const RequestStream& ref = streams[ri];
  const std::size_t n = ref.requests.size();

  ForecastResult res;
  res.at = at;
  res.device = ref.device;
  res.config = options.config.source;
  res.reference = ri;
  res.requests = n;
  res.capacity = options.capacity;

  // Alignment against the reference.
  std::vector<StreamAlignment> aligned(probes.size());
  res.probes.resize(probes.size());
  for (std::size_t k = 0; k < probes.size(); ++k) {
    ForecastProbeSummary& s = res.probes[k];
    s.name = probes[k].name;
    s.parameter = probes[k].parameter;
    s.events = streams[k].events;
    s.requests = streams[k].requests.size();
    s.recorded_peak_reserved = streams[k].recorded_peak_reserved;
    s.peak_requested = streams[k].peak_requested;
    if (k == ri) {
      s.matched = s.agreeing = s.requests;
      continue;
    }
    aligned[k] = align_streams(ref, refp.parameter, streams[k], probes[k].parameter, options.alignment);
    const StreamAlignment& al = aligned[k];
    s.matched = al.matched;
    s.agreeing = al.agreeing;
    s.complete = al.complete;
    s.divergence_count = al.divergences.size();
    for (std::size_t d = 0; d < std::min<std::size_t>(5, al.divergences.size()); ++d)
      s.divergences.push_back(al.divergences[d]);
    const double share = std::min(static_cast<double>(al.matched) / static_cast<double>(n),
                                  static_cast<double>(al.matched) / static_cast<double>(s.requests));
    if (share < 0.5) {
      std::string where =
          al.divergences.empty() ? "" : "; they first differ at " + detail::divergence_text(ref, al.divergences[0]);
      throw ForecastError(probes[k].name + " and " + refp.name +
                          " do not look like one program run at two sizes: only " + detail::forecast_percent(share) +
                          " of their requests align" + where +
                          "; record every probe from the same program and step count");
    }
  }

  // Request i's size at probe k: the reference's own, or the aligned request's (0: none aligned).
  auto size_at_probe = [&](std::size_t k, std::size_t i) {
    return k == ri ? ref.requests[i].size : detail::aligned_size(streams[k], aligned[k], i);
  };

  // Size models and the target's sizes.
  const bool square_law =
      detail::sizes_grow_with_square(ref, streams[order[order.size() - 2]], aligned[order[order.size() - 2]],
                                     refp.parameter / probes[order[order.size() - 2]].parameter);
  // By an image side, a size of (p - c)^2 elements (a convolution without padding, a crop) grows by
  // more than q^2: with two probes such a size is a + c*p^2 with a < 0, not implausible. (With
  // three, the two nearest the target give a + c*p^2: see below.)
  const bool two_probes = probes.size() == 2;
  std::vector<SizeFit> fits(n);
  std::vector<std::uint64_t> sizes(n), grown(n), kept(n);
  std::size_t irregular = 0, implausible = 0;
  std::vector<std::uint8_t> irregular_at(n, 0), implausible_at(n, 0);
  std::vector<std::uint8_t> with_all(n, 1);
  std::size_t aligned_all = 0, aligned_any = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double ps[3];
    std::uint64_t ss[3];
    std::size_t m = 0;
    bool regular = true;         // every aligned size is the reference's over 1, q or q^2
    bool plausible = true;       // ... or between the two: no size shrank or outgrew the square law
    bool plausible_near = true;  // ... against the probe nearest the reference (by an image side, outgrowing it too)
    const double want = static_cast<double>(ref.requests[i].size);
    for (const std::size_t k : order) {
      if (k != ri && aligned[k].other_of[i] == StreamAlignment::kUnmatched) {
        with_all[i] = 0;
        continue;
      }
      const std::uint64_t size = size_at_probe(k, i);
      if (k != ri) {
        const double q = refp.parameter / probes[k].parameter;
        const double got = static_cast<double>(size);
        regular = regular && (detail::size_close(want, got) || detail::size_close(want, got * q) ||
                              detail::size_close(want, got * q * q));
        plausible =
            plausible && (detail::size_plausible(want, got, q) || (two_probes && square_law && want > got * q * q));
        if (k == order[order.size() - 2])
          plausible_near = detail::size_plausible(want, got, q) || (square_law && want > got * q * q);
      }
      ps[m] = probes[k].parameter;
      ss[m++] = size;
    }
    fits[i] = fit_size(ps, ss, m, square_law);
    // By an image side, with three probes, a size the three do not put on a line: on a growing
    // square k*(p - c)^2 (a valid convolution, a crop), the parabola through them is exact, and
    // plausible though it outgrew q^2. Otherwise it is the program's law, a + c*p^2, through the
    // two probes nearest the target, and only their sizes must be plausible: a library picks its
    // algorithm (and a workspace's fixed part) by size, the smallest probe is where the choice most
    // often differs, and a parabola through it bends the fit, or makes the size look implausible.
    if (square_law && m == 3 && fits[i].model != SizeModel::constant &&
        !(fits[i].model == SizeModel::linear && plausible)) {
      if (detail::square_of_line(ps, ss)) {
        plausible = true;
      } else if (plausible_near) {
        fits[i] = fit_size(ps + 1, ss + 1, 2, true);
        plausible = true;
      }
    }
    if (m == 1) fits[i].model = SizeModel::unmatched;
    // Sizes no polynomial with non-negative terms gives (a request paired by position whose size
    // is another's: a workspace chosen by size) are not extrapolated: the request keeps its size at
    // the reference, as an unmatched one does. Aligned sizes that follow no exact 1 : q : q^2 law
    // and that a third probe does not put on a line are fitted, but only approximately known.
    if (m > 1 && !plausible) {
      fits[i] = SizeFit{SizeModel::constant, want, 0, 0};
      ++implausible;
      implausible_at[i] = 1;
    }
    const bool verified = regular || (m == 3 && fits[i].model == SizeModel::linear && plausible);
    if (m > 1 && !verified) {
      ++irregular;
      irregular_at[i] = 1;
    }
    aligned_all += with_all[i];
    aligned_any += m > 1 ? 1 : 0;
    ++res.models[static_cast<std::size_t>(fits[i].model)];
    sizes[i] = fits[i].at(at);
    // A size that grew (or held) up to the largest probe does not shrink past it: a parabola bent
    // by a size that stopped growing there (a buffer or workspace at a cap) can fall below it, to
    // nothing.
    if (m > 1 && plausible && sizes[i] < ref.requests[i].size) sizes[i] = ref.requests[i].size;
    const double growth = square_law ? (at / refp.parameter) * (at / refp.parameter) : at / refp.parameter;
    const auto proportional = static_cast<std::uint64_t>(std::llround(want * growth));
    // The range: what the probes do not determine (unmatched and irregular requests) grown as the
    // program's sizes grow (in proportion to the parameter or its square), or stopped growing at
    // the reference's size.
    const bool known = m > 1 && verified;
    grown[i] = known ? sizes[i] : std::max(sizes[i], proportional);
    kept[i] = known ? sizes[i] : std::min(sizes[i], ref.requests[i].size);
  }
  // What the two largest probes show together (forecast_rules.hpp): a size limit, and sizes that
  // follow the data.
  {
    const std::size_t near = order[order.size() - 2];
    const ForecastRuleFacts facts = detail::apply_forecast_rules(
        ref, streams[near], aligned[near], refp.parameter / probes[near].parameter, refp.parameter, at, square_law,
        {fits, sizes, grown, kept, irregular_at, irregular});
    res.size_limit = facts.size_limit;
    res.capped = facts.capped;
    res.possible_size_limit = facts.possible_size_limit;
    res.would_stop = facts.would_stop;
    res.data_dependent = facts.data_dependent;
    const double q = refp.parameter / probes[near].parameter;
    res.reductions =
        detail::apply_reduction_cap(ref, streams[near], aligned[near], square_law ? q * q : q, options.reduction_cap,
                                    {fits, sizes, grown, kept, irregular_at, irregular});
    // A limit only the largest probe shows that is its largest reduction buffer is explained: the
    // reduction rule sizes those buffers (and, with no cap known, keeps them there in the range).
    if (res.reductions.buffers != 0 && res.possible_size_limit == res.reductions.largest) {
      res.possible_size_limit = 0;
      res.would_stop = 0;
    }
  }
  res.aligned_requests = static_cast<double>(aligned_all) / static_cast<double>(n);
  res.aligned_requests_any = static_cast<double>(aligned_any) / static_cast<double>(n);

  // The target stream and its replay.
  const CompactSnapshot& ref_snap = *refp.snapshot;
  res.target = detail::forecast_target(ref_snap, ref.device, sizes);
  const SnapshotReplayResult main = detail::forecast_replay_once(res.target, ref.device, options.config, 0);
  res.peak_reserved = static_cast<std::uint64_t>(main.peak_reserved);
  res.peak_allocated = static_cast<std::uint64_t>(main.peak_allocated);
  res.peak_requested = main.peak_requested_bytes;
  res.num_device_alloc = main.num_device_alloc;
  // The range: the requests the probes do not determine -- unmatched ones, and irregular ones
  // (aligned, but their sizes follow no exact 1 : q : q^2 law that a third probe does not confirm
  // as a line: workspaces chosen by size, sizes that stop growing) -- grown with the parameter,
  // then kept at the reference's size.
  res.irregular = irregular;
  res.implausible = implausible;
  // The range's ends under `config`, each the peak reserved `main` where it does not apply.
  std::vector<std::uint64_t> stopped;
  if (res.would_stop != 0) {
    stopped = sizes;
    for (std::uint64_t& s : stopped) s = std::min(s, res.possible_size_limit);
  }
  auto range_ends = [&](const AllocatorConfig& config, std::uint64_t main_peak) {
    auto peak_of = [&](const std::vector<std::uint64_t>& s) {
      const CompactSnapshot alt = detail::forecast_target(ref_snap, ref.device, s);
      return static_cast<std::uint64_t>(detail::forecast_replay_once(alt, ref.device, config, 0).peak_reserved);
    };
    const bool unsure = res.models[static_cast<std::size_t>(SizeModel::unmatched)] + irregular != 0;
    return std::array<std::uint64_t, 3>{unsure ? peak_of(grown) : main_peak, irregular != 0 ? peak_of(kept) : main_peak,
                                        res.would_stop != 0 ? peak_of(stopped) : main_peak};
  };
  auto effect = [](std::uint64_t main_peak, const std::array<std::uint64_t, 3>& ends) {
    const double peak = static_cast<double>(std::max<std::uint64_t>(main_peak, 1));
    double e = 0;
    for (const std::uint64_t end : ends) e = std::max(e, std::fabs(static_cast<double>(end) - peak) / peak);
    return e;
  };
  const std::array<std::uint64_t, 3> ends = range_ends(options.config, res.peak_reserved);
  res.peak_reserved_unmatched_grown = ends[0];
  res.peak_reserved_irregular_kept = ends[1];
  res.peak_reserved_possible_limit = ends[2];
  res.unmatched_effect = effect(res.peak_reserved, ends);
  // Under another config, the same range under PyTorch's defaults too: what the probes do not
  // determine is the program's, and a config that rounds sizes up can make its ends replay alike
  // while the target's run (with requests no probe made) lands outside them.
  if (!options.config.source.empty() &&
      res.models[static_cast<std::size_t>(SizeModel::unmatched)] + irregular + res.would_stop != 0) {
    const AllocatorConfig defaults;
    const auto main_default =
        static_cast<std::uint64_t>(detail::forecast_replay_once(res.target, ref.device, defaults, 0).peak_reserved);
    res.unmatched_effect_default = effect(main_default, range_ends(defaults, main_default));
  }
  // The back-test: the reference's stream at each smaller probe's size, replayed, against the
  // replay of that probe's own stream. Where they differ, the probes' request streams differ in
  // a way that moves the peak (requests present at one size only, another order), and the target's
  // stream, which no probe shows, may differ from the reference's as much.
  for (std::size_t k = 0; k < probes.size(); ++k) {
    if (k == ri) continue;
    std::vector<std::uint64_t> back(n);
    for (std::size_t i = 0; i < n; ++i) {
      back[i] =
          aligned[k].other_of[i] != StreamAlignment::kUnmatched ? size_at_probe(k, i) : fits[i].at(probes[k].parameter);
    }
    const CompactSnapshot alt = detail::forecast_target(ref_snap, ref.device, back);
    const double got =
        static_cast<double>(detail::forecast_replay_once(alt, ref.device, options.config, 0).peak_reserved);
    const double own = static_cast<double>(
        detail::forecast_replay_once(*probes[k].snapshot, streams[k].device, options.config, 0).peak_reserved);
    ForecastProbeSummary& s = res.probes[k];
    s.backcast_peak_reserved = static_cast<std::uint64_t>(got);
    s.replayed_peak_reserved = static_cast<std::uint64_t>(own);
    const double e = own > 0 ? (got - own) / own : 0.0;
    if (std::fabs(e) > std::fabs(res.backcast_error)) res.backcast_error = e;
  }
  // The reference's own trace replayed against what the recording allocator reserved: where they
  // differ, the simulated device placed segments otherwise than the recording's driver (the
  // policy breaks ties between equal free blocks by address), and the target's replay, made of
  // the reference's stream, may be as far off.
  {
    ForecastProbeSummary& s = res.probes[ri];
    s.replayed_peak_reserved =
        static_cast<std::uint64_t>(detail::forecast_replay_once(ref_snap, ref.device, options.config, 0).peak_reserved);
    if (s.recorded_peak_reserved != 0 && options.config.source.empty()) {
      res.replay_error =
          (static_cast<double>(s.replayed_peak_reserved) - static_cast<double>(s.recorded_peak_reserved)) /
          static_cast<double>(s.recorded_peak_reserved);
    }
  }
  res.confident = res.data_dependent == 0 && res.unmatched_effect <= options.error_goal &&
                  res.unmatched_effect_default <= options.error_goal &&
                  std::fabs(res.backcast_error) <= options.error_goal &&
                  std::fabs(res.replay_error) <= options.error_goal;

  // What is live at the target's peak of requested bytes, and how it grew.
  {
    const std::size_t peak_event = detail::requested_peak(res.target, ref.device).second;
    std::map<std::string, ForecastGroup> by_model, by_site, by_category;
    std::vector<std::size_t> live;
    std::uint64_t live_bytes = 0, live_aligned = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const ProbeRequest& r = ref.requests[i];
      if (r.alloc_event > peak_event || (r.free_event != ProbeRequest::kNeverFreed && r.free_event <= peak_event))
        continue;
      live.push_back(i);
      live_bytes += sizes[i];
      if (with_all[i] != 0) live_aligned += sizes[i];
      auto add = [&](ForecastGroup& g) {
        ++g.requests;
        g.bytes_at_reference += r.size;
        g.bytes_at_target += sizes[i];
      };
      add(by_model[std::string(size_model_name(fits[i].model))]);
      if (r.site != 0) add(by_site[ref.site_labels.at(r.site)]);
      if (r.category != 0) add(by_category[ref.category_names.at(r.category)]);
    }
    res.aligned_peak_bytes =
        live_bytes == 0 ? 1.0 : static_cast<double>(live_aligned) / static_cast<double>(live_bytes);
    res.by_model = detail::top_groups(by_model, 4);
    res.by_site = detail::top_groups(by_site, options.explain);
    res.by_category = detail::top_groups(by_category, options.explain);
    const std::size_t top = std::min(options.explain, live.size());
    std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(top), live.end(),
                      [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
    for (std::size_t t = 0; t < top; ++t) {
      const std::size_t i = live[t];
      const ProbeRequest& r = ref.requests[i];
      ForecastRequest fr;
      fr.size_at_target = sizes[i];
      fr.model = fits[i].model;
      fr.reference_event = r.alloc_event;
      if (r.site != 0) fr.site = ref.site_labels.at(r.site);
      if (r.category != 0) fr.category = ref.category_names.at(r.category);
      for (std::size_t k = 0; k < probes.size(); ++k) fr.size_at_probes.push_back(size_at_probe(k, i));
      res.largest.push_back(std::move(fr));
    }
  }

  // The requests the probes do not determine, alike ones together, widest range first.
  {
    std::map<std::vector<std::uint64_t>, ForecastUncertain> groups;
    for (std::size_t i = 0; i < n; ++i) {
      if (grown[i] == sizes[i] && kept[i] == sizes[i]) continue;
      const ProbeRequest& r = ref.requests[i];
      std::vector<std::uint64_t> key{r.site, r.category, r.stream};
      for (std::size_t k = 0; k < probes.size(); ++k) key.push_back(size_at_probe(k, i));
      ForecastUncertain& g = groups[key];
      if (g.requests++ != 0) continue;
      g.size_at_probes.assign(key.begin() + 3, key.end());
      g.size_at_target = sizes[i];
      g.size_if_grown = grown[i];
      g.size_if_kept = kept[i];
      g.unmatched = fits[i].model == SizeModel::unmatched;
      // Still kept (the rules refit sizes that follow the data, and stop some at a limit).
      g.implausible = implausible_at[i] != 0 && fits[i].model == SizeModel::constant && sizes[i] == r.size;
      if (r.site != 0) g.site = ref.site_labels.at(r.site);
      if (r.category != 0) g.category = ref.category_names.at(r.category);
      g.reference_event = r.alloc_event;
    }
    for (auto& [key, g] : groups) res.uncertain.push_back(std::move(g));
    auto width = [](const ForecastUncertain& g) {
      return static_cast<double>(g.requests) * static_cast<double>(std::max(g.size_if_grown, g.size_at_target) -
                                                                   std::min(g.size_if_kept, g.size_at_target));
    };
    std::stable_sort(res.uncertain.begin(), res.uncertain.end(),
                     [&](const ForecastUncertain& a, const ForecastUncertain& b) { return width(a) > width(b); });
    if (res.uncertain.size() > options.explain) res.uncertain.resize(options.explain);
  }

  // The straight line through the two largest probes' recorded peaks reserved.
  {
    const ForecastProbeSummary& a = res.probes[order[order.size() - 2]];
    const ForecastProbeSummary& b = res.probes[ri];
    const double slope =
        (static_cast<double>(b.recorded_peak_reserved) - static_cast<double>(a.recorded_peak_reserved)) /
        (b.parameter - a.parameter);
    const double line = static_cast<double>(b.recorded_peak_reserved) + slope * (at - b.parameter);
    res.straight_line_peak_reserved = line > 0 ? static_cast<std::uint64_t>(std::llround(line)) : 0;
  }

  // With a capacity: the replay on a device of that size.
  if (options.capacity != 0) {
    const SnapshotReplayResult capped =
        detail::forecast_replay_once(res.target, ref.device, options.config, options.capacity);
    res.ooms_at_capacity = capped.new_ooms;
    res.fits = capped.new_ooms == 0;
  }

  // Warnings.
  if (res.unmatched_effect > options.error_goal) {
    const std::size_t unmatched = res.models[static_cast<std::size_t>(SizeModel::unmatched)];
    std::string widest;
    if (!res.uncertain.empty()) widest = "; the widest: " + detail::uncertain_text(res.uncertain.front(), probes);
    res.warnings.push_back(
        "the forecast is a range, not a confident number: peak reserved " + format_size(res.peak_reserved) + ", but " +
        format_size(res.peak_reserved_unmatched_grown) + " if the " + std::to_string(unmatched) +
        " request(s) only the largest probe made and the " + std::to_string(irregular) +
        " irregular ones grow as the program's sizes do (in proportion to " + (square_law ? "the square of " : "") +
        "the size), and " + format_size(res.peak_reserved_irregular_kept) + " if the irregular ones stop growing" +
        (res.would_stop == 0
             ? std::string()
             : ", and " + format_size(res.peak_reserved_possible_limit) + " if every request stops at " +
                   format_size(res.possible_size_limit) +
                   " (the largest probe's largest request, reached by growing less than in proportion: it may be "
                   "a library's limit, as a workspace cap, that the smaller probe does not show)") +
        " (irregular: aligned, but their sizes follow no exact constant/linear/square law; " +
        std::to_string(implausible) +
        " of them shrank or outgrew the square law and are kept at the largest probe's size): " +
        detail::forecast_percent(res.unmatched_effect) + " apart, more than the " +
        detail::forecast_percent(options.error_goal) + " goal" + widest + "; a third probe (--run) narrows it");
  }
  if (res.unmatched_effect <= options.error_goal && res.unmatched_effect_default > options.error_goal) {
    res.warnings.push_back(
        "the forecast is not a confident number: under " + res.config + " the range is " +
        detail::forecast_percent(res.unmatched_effect) + " wide, but under PyTorch's defaults the same requests the " +
        "probes do not determine (" + std::to_string(res.models[static_cast<std::size_t>(SizeModel::unmatched)]) +
        " only the largest probe made, " + std::to_string(irregular) + " irregular) move the peak by " +
        detail::forecast_percent(res.unmatched_effect_default) + ", more than the " +
        detail::forecast_percent(options.error_goal) +
        " goal: the config rounds their sizes alike, but a run at the target can make requests no probe made. "
        "A third probe (--run) nearer the target narrows it");
  }
  if (res.data_dependent != 0) {
    res.range_excludes =
        "requests only a run at the target makes, and data-dependent sizes larger than the largest probe's largest "
        "draw at their site, in proportion";
    res.warnings.push_back(detail::data_dependent_warning(res.data_dependent));
  }
  if (std::fabs(res.backcast_error) > options.error_goal) {
    // The range's ends are replays of the reference's stream; a run at the target whose stream
    // differs from it as the probes' differ from each other is outside them.
    res.range_excludes += std::string(res.range_excludes.empty() ? "" : "; nor ") +
                          "requests a run at the target makes otherwise than the largest probe (the probes' "
                          "request streams already differ with the size: the back-test is " +
                          detail::forecast_percent(std::fabs(res.backcast_error)) + " off)";
    res.warnings.push_back(
        "the forecast is not a confident number: the largest probe's request stream, sized for a "
        "smaller probe, replays to a peak reserved " +
        detail::forecast_percent(res.backcast_error) + " off that probe's own (more than the " +
        detail::forecast_percent(options.error_goal) +
        " goal): the runs' request streams differ with the size in ways that move the peak "
        "(requests made at some sizes only); the target's will too. Probes nearer the target "
        "(or a third --run) narrow it");
  }
  if (std::fabs(res.replay_error) > options.error_goal) {
    res.warnings.push_back(
        "the forecast is not a confident number: " + refp.name + "'s own history replays to a peak reserved of " +
        format_size(res.probes[ri].replayed_peak_reserved) + ", " + detail::forecast_percent(res.replay_error) +
        " off the " + format_size(res.probes[ri].recorded_peak_reserved) + " it recorded (more than the " +
        detail::forecast_percent(options.error_goal) +
        " goal): the recording's device placed segments otherwise, and the target's replay, "
        "made of that history, may be as far off");
  }
  for (std::size_t k = 0; k < probes.size(); ++k) {
    if (k == ri) continue;
    if (!res.probes[k].complete) {
      res.warnings.push_back(probes[k].name + ": the alignment stopped at its work limit; the rest is unmatched");
    }
    if (!aligned[k].divergences.empty()) {
      res.warnings.push_back(probes[k].name + " and " + refp.name + " diverge in " +
                             std::to_string(aligned[k].divergences.size()) + " place(s); the first at " +
                             detail::divergence_text(ref, aligned[k].divergences[0]));
    }
  }
  const ForecastNextProbe next = forecast_next_probe(res, options.error_goal);
  res.next_probe = next.size;
  res.next_probe_shows = next.shows;
  return res;
}

GPUMEMPROF_FUNC ForecastReplay forecast_replay(const ForecastResult& forecast, const AllocatorConfig& config,
                                               std::size_t capacity) {
  const SnapshotReplayResult r = detail::forecast_replay_once(forecast.target, forecast.device, config, capacity);
  ForecastReplay out;
  out.peak_reserved = static_cast<std::uint64_t>(r.peak_reserved);
  out.peak_allocated = static_cast<std::uint64_t>(r.peak_allocated);
  out.ooms = r.new_ooms + r.ooms_reproduced;
  return out;
}

GPUMEMPROF_NAMESPACE_END

// After the number formats above, which it uses (so it is last, whichever of these is included first).
#include "gpumemprof/analysis/forecast_next_probe-inl.hpp"
