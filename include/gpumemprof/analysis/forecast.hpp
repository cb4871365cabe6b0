// Analysis layer: will it fit? The peak memory of a program at a larger batch size or sequence
// length, forecast from snapshots of the same program run at two or three smaller sizes ("probes":
// PyTorch's torch.cuda.memory._record_memory_history from the start, or ours; stacks optional).
//
// Method, exact where the probes allow it:
//   1. Each probe's request stream (request_stream.hpp) is aligned to the reference probe's --
//      the probe at the largest parameter, nearest the target (stream_alignment.hpp).
//   2. Each reference request gets a size model from the sizes its aligned requests had
//      (size_model.hpp): constant, linear or quadratic in the parameter (with two probes, a size
//      that grew by no exact law is a fixed part plus the program's law: a + c*p^2 where most
//      requests that grew exactly grew by q^2, an image side; else a line). A request no other probe
//      has ("unmatched") keeps its size at the reference probe; so does an aligned one whose sizes
//      no polynomial with non-negative terms gives ("implausible": it shrank as the parameter grew,
//      or grew by more than q^2, q the ratio of the parameters -- a request paired by position with
//      another, such as a cuDNN workspace chosen by size; a line through it extrapolates to
//      nonsense).
//      What the two largest probes show together (forecast_rules.hpp): a size limit both show
//      (their largest request, reached by growing): requests that grew less than in proportion,
//      or irregular ones, stop there, and those that reached it stay; one only the larger shows is
//      replayed as an end of the range (step 4). PyTorch's reduction buffers stop growing where
//      their thread blocks fill the device (reduction_buffers.hpp). Sizes that follow the data
//      (irregular pairs of sizes seen once in the run): in proportion, the range's high end at
//      their site's largest draw, and the forecast is not `confident` (`range_excludes` says what
//      no range bounds).
//      By an image side, with two probes, a size that grew by more than q^2 is a + c*p^2 with
//      a < 0 ((p - c)^2 elements), not implausible. With three, a size the three do not put on a
//      line is the parabola through them where they grow as k*(p - c)^2 (exact), else a + c*p^2
//      through the two probes nearest the target, implausible only if those two make it so: a
//      library picks its algorithm, and a workspace's fixed part, by size, and the smallest probe
//      is where that choice differs most.
//   3. The target's request stream is the reference's, in the reference's order (so every
//      request lives exactly as long, relative to the others, as it did there), each request at its
//      modelled size; it is replayed through the PyTorch-exact allocator (snapshot_replay.hpp)
//      under the chosen config. That replay's peaks are the forecast.
//   4. How much what the probes do not determine could matter: the unmatched requests and the
//      *irregular* ones -- aligned, but their sizes are not the reference's over 1, q or q^2, and
//      no third probe puts them on a line (workspaces, sizes that stop growing at a cap,
//      data-dependent shapes) -- are replayed grown as the program's sizes grow (by q, or q^2 by
//      an image side), and again each at the lower of its forecast and the reference's size (so
//      each end moves every request one way). When either peak reserved
//      differs from the forecast by more than `error_goal` (3%), the forecast is not `confident`:
//      a warning gives the range and names the widest group of such requests (`uncertain`).
//   5. A back-test: the reference's stream at each smaller probe's recorded sizes, replayed,
//      against the replay of that probe's own stream. A difference over `error_goal` means the
//      streams change with the size in ways that move the peak (requests made at some sizes only,
//      another order): the forecast is not `confident` either, and `range_excludes` says that a
//      run at the target, which will differ again, is outside the range.
//   6. The reference's own history replayed against the peak reserved it recorded (default
//      config): a difference over `error_goal` means the recording's driver placed segments
//      otherwise than the simulated device, and the target's replay may be as far off.
//   7. Not confident: the probe that would narrow it (forecast_next_probe: twice the largest
//      probe, when below the target) and what it would show.
// What it cannot know: requests that only a run at the target size makes (a kernel chosen only
// there), and memory outside the caching allocator (the CUDA context, cuBLAS/NCCL workspaces
// taken with cudaMalloc directly) -- a capacity should be what the allocator can use.
// The straight line through the two largest probes' recorded peaks reserved is given beside.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/analysis/reduction_buffers.hpp"
#include "gpumemprof/analysis/size_model.hpp"
#include "gpumemprof/analysis/stream_alignment.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Inputs a forecast cannot be made from (one line saying what and what to do).
class ForecastError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// One probe: a snapshot of the program run at `parameter` (e.g. batch size 8).
struct ForecastProbe {
  double parameter = 0;
  const CompactSnapshot* snapshot = nullptr;
  std::string name;  ///< how messages name it (a path)
};

struct ForecastOptions {
  AllocatorConfig config;    ///< the policy replayed (default: PyTorch's defaults)
  std::size_t capacity = 0;  ///< device bytes the allocator may use; 0 = no fit verdict
  double error_goal = 0.03;  ///< the unmatched part may move the peak by at most this fraction
  int device = -1;           ///< the trace used; -1 = the one with the most entries
  std::size_t explain = 8;   ///< rows in each explanation list
  /// Where PyTorch's reduction buffers stop growing on the target device (reduction_buffers.hpp);
  /// 0: only where the probes show it.
  std::uint64_t reduction_cap = 0;
  AlignmentOptions alignment;
};

/// What one probe contributed.
struct ForecastProbeSummary {
  std::string name;
  double parameter = 0;
  std::size_t events = 0;
  std::size_t requests = 0;
  std::uint64_t recorded_peak_reserved = 0;  ///< from its segment events
  std::uint64_t peak_requested = 0;
  // Against the reference (the reference itself: all matched).
  std::size_t matched = 0;   ///< its requests aligned with a reference request
  std::size_t agreeing = 0;  ///< ... with a size 1, q or q^2 times the reference's
  bool complete = true;
  std::size_t divergence_count = 0;
  std::uint64_t replayed_peak_reserved = 0;   ///< its own stream replayed (smaller probes)
  std::uint64_t backcast_peak_reserved = 0;   ///< the reference's stream at its size, replayed
  std::vector<StreamDivergence> divergences;  ///< the first few
};

/// Requests grouped (by site, category or size model) and their bytes at the target's peak.
struct ForecastGroup {
  std::string label;
  std::size_t requests = 0;              ///< live at the target's peak of requested bytes
  std::uint64_t bytes_at_reference = 0;  ///< the same requests' bytes at the reference probe
  std::uint64_t bytes_at_target = 0;
};

/// One of the largest requests live at the target's peak.
struct ForecastRequest {
  std::uint64_t size_at_target = 0;
  std::vector<std::uint64_t> size_at_probes;  ///< per probe (0: no aligned request there)
  SizeModel model = SizeModel::constant;
  std::string site;                 ///< user's frame label ("" when no stack was recorded)
  std::string category;             ///< "" when none was recorded
  std::size_t reference_event = 0;  ///< its alloc entry in the reference's trace
};

/// Requests the probes do not determine (unmatched or irregular) that look alike -- the same site,
/// category and sizes in every probe -- and what each could be at the target.
struct ForecastUncertain {
  std::size_t requests = 0;
  std::vector<std::uint64_t> size_at_probes;  ///< per probe, in the order given (0: no aligned request there)
  std::uint64_t size_at_target = 0;           ///< the forecast's (the fit's, or the reference's)
  std::uint64_t size_if_grown = 0;            ///< grown as the program's sizes grow (by q or q^2)
  std::uint64_t size_if_kept = 0;             ///< stopped at the reference's size
  bool unmatched = false;                     ///< only the reference made it
  /// Aligned, but their sizes shrank or outgrew the square law (no size law gives them): kept at
  /// the reference's size, not fitted.
  bool implausible = false;
  std::string site;
  std::string category;
  std::size_t reference_event = 0;  ///< the first one's alloc entry in the reference's trace
};

struct ForecastResult {
  double at = 0;
  int device = 0;
  std::string config;  ///< as given ("" = PyTorch's defaults)
  // The forecast: peaks of the replayed target stream.
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_requested = 0;
  std::int64_t num_device_alloc = 0;
  // How far the unmatched requests could move it.
  std::uint64_t peak_reserved_unmatched_grown = 0;  ///< unmatched requests grown with the parameter
  std::uint64_t peak_reserved_irregular_kept = 0;   ///< irregular requests at the reference's size
  std::size_t irregular = 0;                        ///< aligned requests whose sizes follow no 1 : q : q^2 law
  std::size_t implausible = 0;  ///< ... of which sizes shrank or outgrew the square law: kept at the reference's size
  // What the two largest probes show together (forecast_rules.hpp).
  /// A size limit both show (0: none): the requests that grew less than in proportion stop there.
  std::uint64_t size_limit = 0;
  std::size_t capped = 0;  ///< requests stopped at it
  /// A limit only the largest probe shows (0: none): not applied, but the requests above it at the
  /// target are replayed stopped there (`peak_reserved_possible_limit`; the forecast's when none).
  std::uint64_t possible_size_limit = 0;
  std::size_t would_stop = 0;
  std::uint64_t peak_reserved_possible_limit = 0;
  /// Irregular requests whose sizes follow the data, not the parameter (0: none found; not confident).
  std::size_t data_dependent = 0;
  /// PyTorch's reduction buffers: where they stop growing (reduction_buffers.hpp).
  ReductionBufferFacts reductions;
  double unmatched_effect = 0;  ///< the largest distance of the range's ends from the forecast, / forecast
  /// With a config given: the same under PyTorch's defaults (0 otherwise). A config that rounds
  /// sizes up can make the range's ends replay alike while the program's stream is as uncertain.
  double unmatched_effect_default = 0;
  double backcast_error = 0;    ///< the back-test's largest relative error (see the file comment)
  double replay_error = 0;      ///< the reference's own replay against its recorded peak reserved (default config)
  /// The range: the lowest and highest of the forecast and the replays above.
  [[nodiscard]] std::uint64_t peak_reserved_low() const noexcept {
    return std::min(
        {peak_reserved, peak_reserved_unmatched_grown, peak_reserved_irregular_kept, peak_reserved_possible_limit});
  }
  [[nodiscard]] std::uint64_t peak_reserved_high() const noexcept {
    return std::max(
        {peak_reserved, peak_reserved_unmatched_grown, peak_reserved_irregular_kept, peak_reserved_possible_limit});
  }
  /// What the range does not bound, in words ("" when nothing the probes show is left out): with
  /// data-dependent sizes, requests only a run at the target makes and draws larger than any probe's;
  /// with a back-test off by more than the goal, a target's stream that differs from the reference's.
  std::string range_excludes;
  bool confident = true;  ///< both unmatched effects, |backcast_error| and |replay_error| <= error_goal
  // Alignment quality.
  std::size_t reference = 0;                 ///< index into probes of the reference
  std::size_t requests = 0;                  ///< the reference's (= the target's) requests
  std::size_t models[4] = {0, 0, 0, 0};      ///< requests per SizeModel
  double aligned_requests = 0;               ///< fraction aligned with every other probe
  double aligned_requests_any = 0;           ///< fraction aligned with at least one other probe
  double aligned_peak_bytes = 0;             ///< fraction of the target's peak requested bytes so aligned
  std::vector<ForecastProbeSummary> probes;  ///< in the order given
  // For comparison: the straight line through the two largest probes' recorded peaks reserved.
  std::uint64_t straight_line_peak_reserved = 0;
  // Explanation.
  std::vector<ForecastGroup> by_model;     ///< constant / linear / quadratic / unmatched
  std::vector<ForecastGroup> by_site;      ///< when stacks were recorded
  std::vector<ForecastGroup> by_category;  ///< when categories were recorded
  std::vector<ForecastRequest> largest;
  std::vector<ForecastUncertain> uncertain;  ///< the groups whose range at the target is widest
  // With a capacity.
  std::uint64_t capacity = 0;
  bool fits = true;                  ///< the target stream replayed within `capacity` without an OOM
  std::size_t ooms_at_capacity = 0;  ///< allocations that failed in that replay
  std::vector<std::string> warnings;
  /// When not confident: the size of the probe that would narrow the forecast (forecast_next_probe;
  /// 0: none would, only a run at the target decides) and what it would show, or why none would.
  double next_probe = 0;
  std::string next_probe_shows;
  /// The synthesised target stream (replay it under other configs with forecast_replay).
  CompactSnapshot target;
};

/// A probe's or the target's size as the command line gives it ("64", "0.5"): the one format
/// messages, the text report and the next probe's command use.
[[nodiscard]] inline std::string forecast_size_text(double size) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", size);
  return buf;
}

/// Forecasts the peaks at parameter `at` from 2 or 3 probes (see the file comment). Throws
/// ForecastError when the probes cannot support a forecast: fewer than 2 or more than 3, a
/// parameter given twice, `at` not above every probe's, a probe with no trace or one whose
/// history starts mid-run, or probes that do not align as one program.
[[nodiscard]] ForecastResult forecast_peak(const std::vector<ForecastProbe>& probes, double at,
                                           const ForecastOptions& options = {});

/// Which probe would narrow a forecast that is not `confident` (forecast_next_probe-inl.hpp
/// states the rule): `size` 0 when none would (only a run at the target decides), and `shows` in
/// words: "whether ..." (what that probe would show), or why none would. Empty when confident.
struct ForecastNextProbe {
  double size = 0;
  std::string shows;
};
[[nodiscard]] ForecastNextProbe forecast_next_probe(const ForecastResult& forecast, double error_goal = 0.03);

/// Replays a forecast's target stream under `config` on a device of `capacity` bytes (0: 80 GiB).
struct ForecastReplay {
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::size_t ooms = 0;
};
[[nodiscard]] ForecastReplay forecast_replay(const ForecastResult& forecast, const AllocatorConfig& config,
                                             std::size_t capacity);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/forecast-inl.hpp"  // and forecast_next_probe-inl.hpp, at its end
#endif
