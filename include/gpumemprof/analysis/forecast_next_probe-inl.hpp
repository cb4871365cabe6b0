// Analysis layer: forecast_next_probe()'s body (forecast.hpp declares it). Included at the end of
// forecast-inl.hpp in header-only mode; compiled once in the library (lib/analysis.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
//
// The rule. A forecast that is not confident names one more probe: twice the largest probe's size,
// when that is still below the target. What the probes leave open is how requests grow past the
// largest probe (a workspace that stops at a cap, requests only the largest probe made, sizes off
// every exact law); the probe that shows the most of it is the largest one can afford, and doubling
// keeps the probes' ladder (8, 16 -> 32), the image sides' too (64, 128 -> 256), at about twice
// the largest probe's memory. With it, the three largest probes forecast (the CLI takes three; the
// forecast's rules read the two largest, nearest the target). When twice the largest probe is not
// below the target (the largest already at half the target or above), no probe is named: one
// nearer the target costs nearly what the run at the target costs, and only that run decides.
// Nor when the only doubt is the reference's own replay (the recording's segment placement):
// another probe's sizes do not change that.
// Checked on the H200 recordings (bench/RESULTS.md, docs/forecast.md): of the 6 warned forecasts
// from 1x and 2x to 8x, adding the 4x probe named brings 5 within 3%.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/forecast-inl.hpp"  // its number formats
#include "gpumemprof/analysis/forecast.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC ForecastNextProbe forecast_next_probe(const ForecastResult& f, double error_goal) {
  ForecastNextProbe next;
  if (f.confident || f.probes.empty()) return next;
  double largest = 0;
  for (const ForecastProbeSummary& p : f.probes) largest = std::max(largest, p.parameter);
  const std::string at = forecast_size_text(f.at);
  const std::string big = forecast_size_text(largest);
  const bool range = f.unmatched_effect > error_goal;
  const bool backcast = std::fabs(f.backcast_error) > error_goal;
  if (!range && !backcast && f.data_dependent == 0) {
    next.shows = "no probe would narrow it: the largest probe's own history replays " +
                 detail::forecast_percent(f.replay_error) +
                 " off the peak reserved it recorded (the recording's segment placement), which other sizes do "
                 "not change; only a run at " +
                 at + " would decide";
    return next;
  }
  if (!(2 * largest < f.at)) {
    next.shows = "only a run at " + at + " would decide: the largest probe (" + big +
                 ") is already at half the target or above, and a probe nearer costs nearly as much as that run";
    return next;
  }
  next.size = 2 * largest;
  // What it would show: each doubt the forecast has, the one it names in its warnings first.
  std::string what;
  auto add = [&](const std::string& s) { what += (what.empty() ? "" : ", and ") + s; };
  if (f.would_stop != 0) {
    add("the requests that reach " + format_size(f.possible_size_limit) + " at " + big +
        " stop there (a library's limit, as a workspace cap) or keep growing");
  }
  if (range && !f.uncertain.empty()) {
    const ForecastUncertain& u = f.uncertain.front();
    const std::string site = u.site.empty() ? "" : " at " + u.site;
    if (u.unmatched) {
      add("the " + std::to_string(u.requests) + " request(s)" + site + " only the probe at " + big +
          " made grow with the size (" + format_size(u.size_if_kept) + " each there)");
    } else {
      std::string sizes;
      for (const std::uint64_t b : u.size_at_probes) sizes += (sizes.empty() ? "" : " : ") + format_size(b);
      add("the " + std::to_string(u.requests) + " request(s)" + site + " of " + sizes +
          " keep to a size law (between " + format_size(u.size_if_kept) + " and " + format_size(u.size_if_grown) +
          " at " + at + ")");
    }
  }
  if (f.data_dependent != 0) {
    add("the " + std::to_string(f.data_dependent) +
        " data-dependent sizes draw larger at a larger size (the range takes the largest probe's largest draw)");
  }
  if (backcast) {
    add("the request stream changes again with the size (the back-test is " +
        detail::forecast_percent(f.backcast_error) + " off)");
  }
  next.shows = "whether " + what;
  return next;
}

GPUMEMPROF_NAMESPACE_END
