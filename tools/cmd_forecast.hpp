// `gpumemprof forecast --run 8=a.pickle --run 16=b.pickle --at 64`: the peak memory of the
// program at a larger size, from snapshots of runs at smaller ones (analysis/forecast.hpp says
// how). With --capacity: whether it fits; with --tune: which PyTorch settings make it fit, each
// replayed (the configs `tune` tries).
#pragma once

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "cmd_tune.hpp"
#include "gpumemprof/analysis/forecast.hpp"
#include "gpumemprof/codec/json_writer.hpp"

namespace gpumemprof::tools {

/// A positive number ("64", "0.5"), else a UsageError naming `what`.
inline double forecast_size_arg(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(v > 0)) {
    throw UsageError(what + " takes a positive number (a batch size or sequence length), got '" + text + "'");
  }
  return v;
}

struct ForecastTuneRow {
  std::string config;
  std::string unsupported;
  ForecastReplay replay;
};

inline void print_forecast_text(const ForecastResult& f, const std::vector<ForecastTuneRow>& tuned) {
  const ForecastProbeSummary& ref = f.probes[f.reference];
  std::printf("forecast at %g from %zu probes (reference: %s at %g), device %d's trace, config %s\n", f.at,
              f.probes.size(), ref.name.c_str(), ref.parameter, f.device,
              f.config.empty() ? "<default>" : f.config.c_str());
  for (const ForecastProbeSummary& p : f.probes) {
    std::printf("  probe %-6g %s: %zu requests, recorded peak reserved %s; %zu aligned with the reference\n",
                p.parameter, p.name.c_str(), p.requests, size_text(p.recorded_peak_reserved).c_str(), p.matched);
  }
  std::printf(
      "  alignment: %.1f%% of requests with every probe (%.1f%% with one at least), %.1f%% of the peak's bytes\n",
      f.aligned_requests * 100, f.aligned_requests_any * 100, f.aligned_peak_bytes * 100);
  std::printf("  size models: %zu constant, %zu linear, %zu quadratic, %zu unmatched (kept at the reference's size)\n",
              f.models[0], f.models[1], f.models[2], f.models[3]);
  std::printf("  irregular: %zu (no exact constant/linear/square law), of which %zu kept at the reference's size\n",
              f.irregular, f.implausible);
  if (f.size_limit != 0) {
    std::printf(
        "  size limit: %s, the largest request of the two largest probes; %zu request(s) that grew less than\n"
        "    in proportion stop there at the target\n",
        size_text(f.size_limit).c_str(), f.capped);
  }
  if (f.possible_size_limit != 0) {
    std::printf(
        "  possible size limit: %s, the largest probe's largest request, reached by growing less than in\n"
        "    proportion; not applied, the range stops %zu request(s) there\n",
        size_text(f.possible_size_limit).c_str(), f.would_stop);
  }
  if (const ReductionBufferFacts& r = f.reductions; r.buffers != 0) {
    if (r.cap != 0) {
      std::printf(
          "  reduction buffers: %zu (PyTorch's split reductions), stopped at %s (%s): %zu lowered at the target\n",
          r.buffers, size_text(r.cap).c_str(), r.cap_shown ? "the probes show it" : "given", r.stopped);
    } else {
      std::printf(
          "  reduction buffers: %zu (PyTorch's split reductions), largest %s; where they stop on the device is\n"
          "    not known (--reduction-cap): the range keeps %zu forecast above that size there\n",
          r.buffers, size_text(r.largest).c_str(), r.unbounded);
    }
  }
  if (f.data_dependent != 0) {
    std::printf(
        "  data-dependent: %zu irregular request(s) whose sizes occur once in the run (forecast in proportion)\n",
        f.data_dependent);
  }
  std::printf("  peak_requested_bytes  %14llu  (%s)\n", static_cast<unsigned long long>(f.peak_requested),
              size_text(f.peak_requested).c_str());
  std::printf("  peak_allocated_bytes  %14llu  (%s)\n", static_cast<unsigned long long>(f.peak_allocated),
              size_text(f.peak_allocated).c_str());
  std::printf("  peak_reserved_bytes   %14llu  (%s)%s\n", static_cast<unsigned long long>(f.peak_reserved),
              size_text(f.peak_reserved).c_str(),
              f.confident ? ""
                          : ("  NOT CONFIDENT: " + size_text(f.peak_reserved_low()) + " to " +
                             size_text(f.peak_reserved_high()) +
                             (f.range_excludes.empty() ? "" : "; the range does not bound " + f.range_excludes))
                                .c_str());
  std::printf("  back-test: the reference's stream at the smaller probes' sizes replays %+.1f%% off their own\n",
              f.backcast_error * 100);
  std::printf("  the reference's own history replays %+.1f%% off the peak reserved it recorded\n",
              f.replay_error * 100);
  std::printf("  straight line through the probes' peaks: %s\n", size_text(f.straight_line_peak_reserved).c_str());
  auto groups = [](const char* title, const std::vector<ForecastGroup>& g) {
    if (g.empty()) return;
    std::printf("  %s (live at the peak: reference -> target):\n", title);
    for (const ForecastGroup& x : g) {
      std::printf("    %10s -> %10s  %6zu req  %s\n", size_text(x.bytes_at_reference).c_str(),
                  size_text(x.bytes_at_target).c_str(), x.requests, x.label.c_str());
    }
  };
  groups("by size model", f.by_model);
  groups("what grows, by site", f.by_site);
  groups("by category", f.by_category);
  if (!f.largest.empty()) {
    std::printf("  largest requests at the target:\n");
    for (const ForecastRequest& r : f.largest) {
      std::printf("    %10s  %-9s  entry %zu%s%s\n", size_text(r.size_at_target).c_str(),
                  std::string(size_model_name(r.model)).c_str(), r.reference_event, r.site.empty() ? "" : "  ",
                  r.site.c_str());
    }
  }
  if (!f.uncertain.empty()) {
    std::printf("  what the probes do not determine (the range), widest first:\n");
    for (const ForecastUncertain& u : f.uncertain) {
      std::string sizes;
      for (const std::uint64_t b : u.size_at_probes)
        sizes += (sizes.empty() ? "" : " : ") + (b == 0 ? "-" : size_text(b));
      std::printf("    %6zu req  %s -> %s at the target (%s if kept, %s if grown)%s%s%s\n", u.requests, sizes.c_str(),
                  size_text(u.size_at_target).c_str(), size_text(u.size_if_kept).c_str(),
                  size_text(u.size_if_grown).c_str(),
                  u.unmatched     ? "  unmatched"
                  : u.implausible ? "  kept: no size law"
                                  : "",
                  u.site.empty() ? "" : "  ", u.site.c_str());
    }
  }
  if (f.capacity != 0) {
    if (f.fits) {
      std::printf("  fits in %s: %s to spare at the peak reserved\n", size_text(f.capacity).c_str(),
                  size_text(f.capacity > f.peak_reserved ? f.capacity - f.peak_reserved : 0).c_str());
    } else {
      std::printf("  does NOT fit in %s: %zu allocation(s) fail; it needs about %s more\n",
                  size_text(f.capacity).c_str(), f.ooms_at_capacity,
                  size_text(f.peak_reserved > f.capacity ? f.peak_reserved - f.capacity : 0).c_str());
    }
  }
  for (const ForecastTuneRow& t : tuned) {
    const std::string label = t.config.empty() ? "<default>" : t.config;
    if (!t.unsupported.empty()) {
      std::printf("  tune %-62s  (%s)\n", label.c_str(), t.unsupported.c_str());
    } else {
      std::printf("  tune %-62s  peak reserved %10s  %s\n", label.c_str(), size_text(t.replay.peak_reserved).c_str(),
                  f.capacity == 0      ? ""
                  : t.replay.ooms == 0 ? "fits"
                                       : "OOM");
    }
  }
  for (const std::string& w : f.warnings) std::printf("warning: %s\n", w.c_str());
  if (f.next_probe != 0) {
    // The command with that probe: the CLI takes three, so the smallest goes when three were given.
    std::vector<const ForecastProbeSummary*> keep;
    for (const ForecastProbeSummary& p : f.probes) keep.push_back(&p);
    std::sort(keep.begin(), keep.end(), [](auto* a, auto* b) { return a->parameter < b->parameter; });
    if (keep.size() == 3) keep.erase(keep.begin());
    std::string cmd = "gpumemprof forecast";
    for (const ForecastProbeSummary* p : keep) cmd += " --run " + forecast_size_text(p->parameter) + "=" + p->name;
    const std::string size = forecast_size_text(f.next_probe);
    std::printf("next probe: a probe at %s would show %s: %s --run %s=FILE --at %s\n", size.c_str(),
                f.next_probe_shows.c_str(), cmd.c_str(), size.c_str(), forecast_size_text(f.at).c_str());
  } else if (!f.confident) {
    std::printf("next probe: none; %s\n", f.next_probe_shows.c_str());
  }
}

inline void print_forecast_json(const ForecastResult& f, const std::vector<ForecastTuneRow>& tuned) {
  JsonWriter w(std::cout);
  w.begin_dict();
  w.field("at", f.at);
  w.field("config", f.config);
  w.field("device", f.device);
  w.field("peak_reserved_bytes", f.peak_reserved);
  w.field("peak_allocated_bytes", f.peak_allocated);
  w.field("peak_requested_bytes", f.peak_requested);
  w.field("confident", f.confident);
  w.field("peak_reserved_bytes_if_unmatched_grow", f.peak_reserved_unmatched_grown);
  w.field("peak_reserved_bytes_if_irregular_kept", f.peak_reserved_irregular_kept);
  w.field("peak_reserved_bytes_if_stopped_at_possible_limit", f.peak_reserved_possible_limit);
  w.field("peak_reserved_bytes_low", f.peak_reserved_low());
  w.field("peak_reserved_bytes_high", f.peak_reserved_high());
  w.field("range_bounds_all", f.range_excludes.empty());
  w.field("range_excludes", f.range_excludes);
  w.field("irregular_requests", f.irregular);
  w.field("implausible_requests", f.implausible);
  w.field("size_limit_bytes", f.size_limit);
  w.field("size_limit_requests", f.capped);
  w.field("possible_size_limit_bytes", f.possible_size_limit);
  w.field("possible_size_limit_requests", f.would_stop);
  w.field("data_dependent_requests", f.data_dependent);
  w.field("reduction_buffers", f.reductions.buffers);
  w.field("reduction_cap_bytes", f.reductions.cap);
  w.field("reduction_cap_shown", f.reductions.cap_shown);
  w.field("reduction_buffers_stopped", f.reductions.stopped);
  w.field("reduction_buffers_unbounded", f.reductions.unbounded);
  w.field("backcast_error", f.backcast_error);
  w.field("replay_error", f.replay_error);
  w.field("unmatched_effect", f.unmatched_effect);
  w.field("unmatched_effect_default", f.unmatched_effect_default);
  w.field("straight_line_peak_reserved_bytes", f.straight_line_peak_reserved);
  w.key("next_probe");  // null: none would narrow it (or confident)
  if (f.next_probe != 0) {
    w.value(f.next_probe);
  } else {
    w.value(nullptr);
  }
  w.field("next_probe_shows", f.next_probe_shows);
  if (f.capacity != 0) {
    w.field("capacity_bytes", f.capacity);
    w.field("fits", f.fits);
    w.field("margin_bytes", static_cast<double>(f.capacity) - static_cast<double>(f.peak_reserved));
  }
  w.key("alignment");
  w.begin_dict();
  w.field("requests", f.requests);
  w.field("aligned_requests", f.aligned_requests);
  w.field("aligned_requests_any", f.aligned_requests_any);
  w.field("aligned_peak_bytes", f.aligned_peak_bytes);
  w.field("constant", f.models[0]);
  w.field("linear", f.models[1]);
  w.field("quadratic", f.models[2]);
  w.field("unmatched", f.models[3]);
  w.end_dict();
  w.key("probes");
  w.begin_list();
  for (const ForecastProbeSummary& p : f.probes) {
    w.begin_dict();
    w.field("path", p.name);
    w.field("size", p.parameter);
    w.field("requests", p.requests);
    w.field("matched", p.matched);
    w.field("agreeing", p.agreeing);
    w.field("divergences", p.divergence_count);
    w.field("recorded_peak_reserved_bytes", p.recorded_peak_reserved);
    w.field("replayed_peak_reserved_bytes", p.replayed_peak_reserved);
    w.field("backcast_peak_reserved_bytes", p.backcast_peak_reserved);
    w.end_dict();
  }
  w.end_list();
  auto groups = [&](const char* key, const std::vector<ForecastGroup>& g) {
    w.key(key);
    w.begin_list();
    for (const ForecastGroup& x : g) {
      w.begin_dict();
      w.field("label", x.label);
      w.field("requests", x.requests);
      w.field("bytes_at_reference", x.bytes_at_reference);
      w.field("bytes_at_target", x.bytes_at_target);
      w.end_dict();
    }
    w.end_list();
  };
  groups("by_model", f.by_model);
  groups("by_site", f.by_site);
  groups("by_category", f.by_category);
  w.key("uncertain");
  w.begin_list();
  for (const ForecastUncertain& u : f.uncertain) {
    w.begin_dict();
    w.field("requests", u.requests);
    w.key("size_at_probes");
    w.begin_list();
    for (const std::uint64_t b : u.size_at_probes) w.value(b);
    w.end_list();
    w.field("size_at_target", u.size_at_target);
    w.field("size_if_kept", u.size_if_kept);
    w.field("size_if_grown", u.size_if_grown);
    w.field("unmatched", u.unmatched);
    w.field("implausible", u.implausible);
    w.field("site", u.site);
    w.field("category", u.category);
    w.field("reference_entry", u.reference_event);
    w.end_dict();
  }
  w.end_list();
  w.key("largest");
  w.begin_list();
  for (const ForecastRequest& r : f.largest) {
    w.begin_dict();
    w.field("size_at_target", r.size_at_target);
    w.field("model", std::string(size_model_name(r.model)));
    w.field("site", r.site);
    w.field("category", r.category);
    w.field("reference_entry", r.reference_event);
    w.end_dict();
  }
  w.end_list();
  if (!tuned.empty()) {
    w.key("tune");
    w.begin_list();
    for (const ForecastTuneRow& t : tuned) {
      w.begin_dict();
      w.field("config", t.config);
      w.field("supported", t.unsupported.empty());
      w.field("peak_reserved_bytes", t.replay.peak_reserved);
      w.field("fits", f.capacity == 0 || (t.unsupported.empty() && t.replay.ooms == 0));
      w.end_dict();
    }
    w.end_list();
  }
  w.key("warnings");
  w.begin_list();
  for (const std::string& s : f.warnings) w.value(s);
  w.end_list();
  w.end_dict();
  w.finish();
  std::cout << '\n' << std::flush;
}

inline int cmd_forecast(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> runs;  // "8", "a.pickle"
  std::vector<char*> rest{argv[0], argv[1]};
  for (int i = 2; i < argc; ++i) {  // --run repeats: take them out before the common parser
    std::string a = argv[i];
    std::string value;
    if (a == "--run") {
      if (i + 1 >= argc) throw UsageError("option --run needs a value SIZE=SNAPSHOT");
      value = argv[++i];
    } else if (a.rfind("--run=", 0) == 0) {
      value = a.substr(6);
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    const auto eq = value.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
      throw UsageError("--run takes SIZE=SNAPSHOT (e.g. --run 8=batch8.pickle), got '" + value + "'");
    }
    runs.emplace_back(value.substr(0, eq), value.substr(eq + 1));
  }
  const Args args(static_cast<int>(rest.size()), rest.data(), 2, {"--help", "--json", "--tune"},
                  {"--at", "--capacity", "--config", "--device", "--reduction-cap"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof forecast --run SIZE=SNAPSHOT --run SIZE=SNAPSHOT [--run SIZE=SNAPSHOT] --at SIZE\n"
        "                           [--capacity BYTES] [--config CONF | --tune] [--device N]\n"
        "                           [--reduction-cap BYTES] [--json]\n"
        "  Forecasts the peak memory of a program at a larger batch size or sequence length (--at) from\n"
        "  snapshots of the same program run at 2 or 3 smaller sizes, each with its whole history\n"
        "  (torch.cuda.memory._record_memory_history() from the start; PyTorch's pickles or ours, .gz too).\n"
        "  The runs' requests are aligned, each request's size is fitted (constant, linear or quadratic in\n"
        "  the size), and the request stream at the target is replayed through PyTorch's allocator policy\n"
        "  (--config: a PYTORCH_CUDA_ALLOC_CONF). --capacity: whether it fits in that many bytes (what the\n"
        "  allocator can use: the device's memory less the CUDA context's). --tune: each config `tune`\n"
        "  tries, replayed at the target. When requests only the largest run made could move the peak by\n"
        "  more than 3%, the forecast says so and gives the range. --reduction-cap: where PyTorch's\n"
        "  reduction buffers stop growing on the target device (132.75MiB on an H200 with torch 2.11:\n"
        "  `gpumemprof reductions` reads it off a run that reaches it; gpumemprof_torch.forecast measures\n"
        "  it); without it, only where the runs show it.\n"
        "  --json: one JSON document.\n",
        stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw UsageError("unexpected argument '" + args.positional()[0] + "'; give snapshots with --run SIZE=SNAPSHOT");
  if (runs.size() < 2) {
    throw UsageError("a forecast needs 2 or 3 runs at smaller sizes (--run 8=a.pickle --run 16=b.pickle), got " +
                     std::to_string(runs.size()));
  }
  if (runs.size() > 3) throw UsageError("at most 3 --run probes, got " + std::to_string(runs.size()));
  if (!args.has("--at")) throw UsageError("--at SIZE is required: the batch size or sequence length to forecast");
  if (args.has("--config") && args.has("--tune")) throw UsageError("give --config or --tune, not both");
  const double at = forecast_size_arg(args.get("--at"), "--at");
  ForecastOptions opt;
  opt.capacity = bytes_option(args, "--capacity");
  opt.reduction_cap = bytes_option(args, "--reduction-cap");
  if (args.has("--config")) opt.config = AllocatorConfig(args.get("--config"));
  if (args.has("--device")) opt.device = static_cast<int>(args.count("--device", 0, 1024));
  std::vector<CompactSnapshot> snaps;
  snaps.reserve(runs.size());
  std::vector<ForecastProbe> probes;
  for (const auto& [size, path] : runs) {
    const double p = forecast_size_arg(size, "--run " + size + "=" + path);
    snaps.push_back(load_cli_snapshot(path));
    probes.push_back({p, &snaps.back(), path});
  }
  ForecastResult f;
  try {
    f = forecast_peak(probes, at, opt);
  } catch (const ForecastError& e) {
    throw UsageError(e.what());
  }
  std::vector<ForecastTuneRow> tuned;
  if (args.has("--tune")) {
    for (const std::string& conf : tune_grid()) {
      ForecastTuneRow row;
      row.config = conf;
      try {
        row.replay = forecast_replay(f, AllocatorConfig(conf), opt.capacity);
      } catch (const ConfigError&) {
        row.unsupported = "not supported by this build";
      }
      tuned.push_back(row);
    }
  }
  if (args.has("--json")) {
    print_forecast_json(f, tuned);
  } else {
    print_forecast_text(f, tuned);
  }
  return 0;
}

}  // namespace gpumemprof::tools
