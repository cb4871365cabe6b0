// Analysis layer: what the forecast (forecast.hpp) reads off its two largest probes' aligned
// request streams together, beyond each request's own size model: whether the program's sizes grow
// with the square of the parameter (an image side), and the two facts below.
//
//   - A size limit the probes show. A library that caps a workspace (cuDNN, cuBLAS) makes
//     requests that grow with the parameter until they reach the cap and then stay there. Two
//     probes show such a cap when the largest request of each is the same size L, and in the
//     larger one at least two requests reached L by growing from a smaller size (so L is where
//     growth stopped, not a buffer that never grew). Requests that grew less than in proportion
//     (less than the program's law: q, or q^2 by an image side) between those two probes are then
//     stopped at L at the target, as are irregular requests (no exact law: workspaces) forecast
//     above it; requests at L in the larger probe that reached it so, or were at L in both, stay
//     at L (a parabola through a third, smaller probe would bend them down). Requests that grew
//     exactly in proportion are not: they are the program's tensors (activations grow past any
//     workspace cap), and a cap no probe shows is not assumed (capping every request that grew
//     less than in proportion breaks the CNNs whose workspaces are a fixed part and a line). When
//     only the larger probe shows such a limit (its largest request, reached by growing less than
//     in proportion), it is not applied, but the range replays every request stopped there: the
//     forecast is then not confident.
//   - Data-dependent sizes. A deterministic program repeats its requests in every step, so a
//     request whose size followed no exact law between two probes (a workspace chosen by size, a
//     fixed part and a line) has the same pair of sizes once per step. Sizes that follow the data
//     (tokens routed to experts, boolean masks, nonzero) are drawn anew in every step: such a pair
//     occurs once in the whole run. When more than one in ten of the irregular requests are such
//     one-offs, the sizes depend on the data: each one is forecast in proportion to its size at
//     the largest probe (a line through two draws amplifies their noise); the range's high end
//     takes each as large as the largest draw its site made there (another draw may be any of
//     them), in proportion. A run at the target can draw larger sizes and take other paths
//     (requests no probe made), which no range bounds, so the forecast is not confident.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/analysis/size_model.hpp"
#include "gpumemprof/analysis/stream_alignment.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// The size of `other`'s request aligned with `ref`'s request `i`; 0 when none.
inline std::uint64_t aligned_size(const RequestStream& other, const StreamAlignment& al, std::size_t i) {
  const std::int64_t j = al.other_of[i];
  return j == StreamAlignment::kUnmatched ? 0 : other.requests[static_cast<std::size_t>(j)].size;
}

/// Whether a request of `got` bytes that is `want` bytes at q times the parameter grew, but less
/// than by `growth` (q, or q^2 by an image side), beyond size_close's tolerance.
inline bool grew_less_than(double want, double got, double growth) noexcept {
  return got > 0 && want > got && want < got * growth && !size_close(want, got * growth);
}

/// `ref`'s largest request size when at least two of its requests reached it by growing from a
/// smaller size in `other` (at 1/q of the parameter), less than by `growth`: where growth may have
/// stopped at a limit. 0 otherwise.
inline std::uint64_t possible_size_limit(const RequestStream& ref, const RequestStream& other,
                                         const StreamAlignment& al, double growth) {
  std::uint64_t ref_max = 0;
  for (const ProbeRequest& r : ref.requests) ref_max = std::max(ref_max, r.size);
  std::size_t reached = 0;
  for (std::size_t i = 0; i < ref.requests.size(); ++i) {
    const auto got = static_cast<double>(aligned_size(other, al, i));
    if (ref.requests[i].size == ref_max && grew_less_than(static_cast<double>(ref_max), got, growth)) ++reached;
  }
  return reached >= 2 ? ref_max : 0;
}

/// The size limit `ref` and `other` show (see the file comment): the possible limit above when it
/// is `other`'s largest request size too. 0 when they show none.
inline std::uint64_t observed_size_limit(const RequestStream& ref, const RequestStream& other,
                                         const StreamAlignment& al, double growth) {
  const std::uint64_t limit = possible_size_limit(ref, other, al, growth);
  std::uint64_t other_max = 0;
  for (const ProbeRequest& r : other.requests) other_max = std::max(other_max, r.size);
  return limit != 0 && other_max == limit ? limit : 0;
}

/// Per reference request: 1 when it is irregular (`irregular[i]`) and its pair of sizes
/// (`other`'s, the reference's), with its stream, site and category, occurs once in the run.
inline std::vector<std::uint8_t> one_off_requests(const RequestStream& ref, const RequestStream& other,
                                                  const StreamAlignment& al,
                                                  const std::vector<std::uint8_t>& irregular) {
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;
  std::map<Key, std::size_t> seen;
  auto key = [&](std::size_t i) {
    return Key{ref.requests[i].key(), aligned_size(other, al, i), ref.requests[i].size};
  };
  for (std::size_t i = 0; i < ref.requests.size(); ++i) {
    if (irregular[i] != 0) ++seen[key(i)];
  }
  std::vector<std::uint8_t> once(ref.requests.size(), 0);
  for (std::size_t i = 0; i < ref.requests.size(); ++i) {
    if (irregular[i] != 0 && aligned_size(other, al, i) != 0 && seen[key(i)] == 1) once[i] = 1;
  }
  return once;
}

}  // namespace detail

/// What apply_forecast_rules found (the forecast copies it into its result).
struct ForecastRuleFacts {
  std::uint64_t size_limit = 0;           ///< a limit both probes show (0: none)
  std::size_t capped = 0;                 ///< requests stopped at it
  std::uint64_t possible_size_limit = 0;  ///< a limit only the reference shows (the range replays it)
  std::size_t would_stop = 0;             ///< requests larger than it at the target
  std::size_t data_dependent = 0;         ///< one-off irregular requests, when they are more than 1 in 10
};

/// The forecast's per-request state the rules adjust: each reference request's fit, its size at
/// the target, the range's grown and kept sizes, whether it is irregular, and their count.
struct ForecastRuleState {
  std::vector<SizeFit>& fits;
  std::vector<std::uint64_t>& sizes;
  std::vector<std::uint64_t>& grown;
  std::vector<std::uint64_t>& kept;
  std::vector<std::uint8_t>& irregular_at;
  std::size_t& irregular;
};

namespace detail {

/// Whether the program's sizes grow with the square of the parameter: more of the reference's
/// requests aligned in `other` grew exactly by q^2 than exactly by q (q: the parameters' ratio).
/// An image side, not a batch or a sequence length (there attention scores grow by q^2, but most
/// tensors by q).
inline bool sizes_grow_with_square(const RequestStream& ref, const RequestStream& other, const StreamAlignment& al,
                                   double q) {
  std::size_t by_q = 0, by_square = 0;
  for (std::size_t i = 0; i < ref.requests.size(); ++i) {
    if (al.other_of[i] == StreamAlignment::kUnmatched) continue;
    const double want = static_cast<double>(ref.requests[i].size);
    const double got = static_cast<double>(aligned_size(other, al, i));
    if (size_close(want, got)) continue;
    if (size_close(want, got * q))
      ++by_q;
    else if (size_close(want, got * q * q))
      ++by_square;
  }
  return by_square > by_q;
}

/// The warning when `requests` sizes follow the data (see the file comment).
inline std::string data_dependent_warning(std::size_t requests) {
  return "the forecast is not a confident number: " + std::to_string(requests) +
         " request(s) have sizes that follow the data, not the batch size or sequence length (their growth "
         "between the two largest probes follows no law and occurs once in the run, where a deterministic program "
         "repeats it every step: tokens routed to experts, masks, nonzero). They are forecast in proportion to the "
         "largest probe's sizes; the range's high end takes each as large as the largest its site drew there, in "
         "proportion. A run at the target draws other sizes and may make requests no probe made (other kernels past "
         "other sizes): the range does not bound those, nor draws larger than any probe's; measure at the target, or "
         "keep a margin";
}

/// Applies the file comment's rules to `st`: `ref` is the largest probe (at `ref_parameter`),
/// `near` the next one (q times smaller), `at` the target; `square_law` as forecast.hpp.
inline ForecastRuleFacts apply_forecast_rules(const RequestStream& ref, const RequestStream& near,
                                              const StreamAlignment& al, double q, double ref_parameter, double at,
                                              bool square_law, ForecastRuleState st) {
  ForecastRuleFacts f;
  const std::size_t n = ref.requests.size();
  const double law = square_law ? q * q : q;
  const double growth = square_law ? (at / ref_parameter) * (at / ref_parameter) : at / ref_parameter;
  auto want = [&](std::size_t i) { return static_cast<double>(ref.requests[i].size); };
  auto got = [&](std::size_t i) { return static_cast<double>(aligned_size(near, al, i)); };
  f.size_limit = observed_size_limit(ref, near, al, law);
  // A limit only the largest probe shows is not applied; the range replays every request stopped there.
  f.possible_size_limit = f.size_limit != 0 ? 0 : possible_size_limit(ref, near, al, law);
  for (std::size_t i = 0; i < n && f.possible_size_limit != 0; ++i) f.would_stop += st.sizes[i] > f.possible_size_limit;
  for (std::size_t i = 0; i < n && f.size_limit != 0; ++i) {
    // At the limit in the reference, reached by growing less than in proportion (or held there
    // since the smaller probe): stays there, whatever a fit through a third probe says. Above it
    // at the target, having grown less than in proportion or by no exact law (a workspace, not a
    // tensor of the program's): stops there.
    const bool below_law = grew_less_than(want(i), got(i), law);
    const bool reached = ref.requests[i].size == f.size_limit && (below_law || got(i) == want(i));
    const bool stops = st.sizes[i] > f.size_limit && (below_law || st.irregular_at[i] != 0);
    const bool settled = st.sizes[i] == f.size_limit && st.grown[i] == f.size_limit && st.irregular_at[i] == 0;
    if (settled || !(reached || stops)) continue;
    st.sizes[i] = st.grown[i] = st.kept[i] = f.size_limit;
    st.fits[i] = SizeFit{SizeModel::constant, static_cast<double>(f.size_limit), 0, 0};
    ++f.capped;
    if (st.irregular_at[i] != 0) --st.irregular;
    st.irregular_at[i] = 0;
  }
  const std::vector<std::uint8_t> once = one_off_requests(ref, near, al, st.irregular_at);
  const auto one_offs = static_cast<std::size_t>(std::count(once.begin(), once.end(), std::uint8_t{1}));
  if (one_offs * 10 <= st.irregular) return f;
  f.data_dependent = one_offs;
  // In proportion to the largest probe's size. The range's high end takes each as large as the
  // largest draw its site (stream, site and category) made in the largest probe, in proportion,
  // and grows it by the largest ratio beyond the program's law that the draws showed between the
  // probes: another draw may be any of them.
  double spread = 1;
  std::map<std::uint64_t, double> largest_draw;  // per key()
  for (std::size_t i = 0; i < n; ++i) {
    if (once[i] == 0) continue;
    spread = std::max(spread, want(i) / (got(i) * law));
    double& top = largest_draw[ref.requests[i].key()];
    top = std::max(top, want(i));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (once[i] == 0) continue;
    st.fits[i] = square_law ? SizeFit{SizeModel::quadratic, 0, 0, want(i) / (ref_parameter * ref_parameter)}
                            : SizeFit{SizeModel::linear, 0, want(i) / ref_parameter, 0};
    st.sizes[i] = st.fits[i].at(at);
    const double high = std::max(want(i) * spread, largest_draw[ref.requests[i].key()]) * growth;
    st.grown[i] = std::max(st.sizes[i], static_cast<std::uint64_t>(std::llround(high)));
  }
  return f;
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
