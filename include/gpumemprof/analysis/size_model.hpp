// Analysis layer: how one request's size depends on the parameter a program is run at (batch
// size, sequence length), fitted from the sizes the aligned request had in two or three probes.
//
//   - constant: the same size in every probe;
//   - linear: size = a + b*p through the probes (with two probes: whenever the sizes differ and
//     the square law below does not hold; with three: when the third lies on the line);
//   - quadratic: with two probes where the sizes grew exactly by the square of the parameters'
//     ratio (size = c*p^2: attention scores by sequence length), or, when the program's sizes grow
//     with the square of the parameter (`square_law`: an image side), where they grew by another
//     ratio (size = a + c*p^2: a buffer for a tensor of p^2 elements and a fixed part, as a
//     convolution's workspace); with three, the parabola through them when they are not on a line.
// "Exactly" and "on the line" allow 1/256 of the size (plus half a byte), as the alignment does.
// A size extrapolated below one byte is one byte (a request the program made stays a request).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class SizeModel : std::uint8_t { constant, linear, quadratic, unmatched };

/// "constant", "linear", "quadratic", "unmatched".
[[nodiscard]] inline std::string_view size_model_name(SizeModel m) noexcept {
  switch (m) {
    case SizeModel::constant: return "constant";
    case SizeModel::linear: return "linear";
    case SizeModel::quadratic: return "quadratic";
    case SizeModel::unmatched: return "unmatched";
  }
  return "unmatched";
}

/// size(p) = c0 + c1*p + c2*p^2.
struct SizeFit {
  SizeModel model = SizeModel::constant;
  double c0 = 0, c1 = 0, c2 = 0;
  [[nodiscard]] std::uint64_t at(double p) const noexcept {
    const double v = std::round(c0 + c1 * p + c2 * p * p);
    return v < 1.0 ? 1 : static_cast<std::uint64_t>(v);
  }
};

namespace detail {
inline bool size_close(double want, double got) noexcept { return std::fabs(want - got) <= want / 256.0 + 0.5; }
/// Whether a size `want` at parameter p*q can come from `got` at p by a polynomial of degree <= 2
/// with non-negative terms: got <= want <= got * q^2 (q > 1), with size_close's tolerance.
inline bool size_plausible(double want, double got, double q) noexcept {
  return size_close(want, got) || size_close(want, got * q * q) || (want >= got && want <= got * q * q);
}
}  // namespace detail

/// The model of a request seen with sizes `s[k]` at parameters `p[k]` (n = 1..3, parameters
/// distinct; n = 1 gives a constant). `square_law`: the program's sizes grow with the square of the
/// parameter (see the file comment; only two probes use it). See the file comment.
[[nodiscard]] inline SizeFit fit_size(const double* p, const std::uint64_t* s, std::size_t n,
                                      bool square_law = false) noexcept {
  SizeFit f;
  f.c0 = static_cast<double>(s[n - 1]);
  bool same = true;
  for (std::size_t k = 0; k + 1 < n; ++k) same = same && s[k] == s[n - 1];
  if (n == 1 || same) return f;
  // The line through the last two points (the probes nearest the target come last).
  const double x0 = p[n - 2], x1 = p[n - 1];
  const double y0 = static_cast<double>(s[n - 2]), y1 = static_cast<double>(s[n - 1]);
  const double slope = (y1 - y0) / (x1 - x0);
  if (n == 2) {
    const double ratio = x1 / x0;
    if (y0 > 0 && detail::size_close(y1, y0 * ratio * ratio)) {
      f.model = SizeModel::quadratic;
      f.c0 = 0;
      f.c2 = y1 / (x1 * x1);
      return f;
    }
    if (square_law) {  // a fixed part and one that grows with the square, as the program's sizes do
      f.model = SizeModel::quadratic;
      f.c2 = (y1 - y0) / (x1 * x1 - x0 * x0);
      f.c0 = y1 - f.c2 * x1 * x1;
      return f;
    }
    f.model = SizeModel::linear;
    f.c1 = slope;
    f.c0 = y1 - slope * x1;
    return f;
  }
  const double xa = p[0], ya = static_cast<double>(s[0]);
  if (detail::size_close(ya, y1 + slope * (xa - x1))) {
    f.model = SizeModel::linear;
    f.c1 = slope;
    f.c0 = y1 - slope * x1;
    return f;
  }
  // The parabola through the three points (Newton's divided differences).
  const double d01 = (y0 - ya) / (x0 - xa);
  const double d12 = slope;
  const double c2 = (d12 - d01) / (x1 - xa);
  f.model = SizeModel::quadratic;
  f.c2 = c2;
  f.c1 = d01 - c2 * (xa + x0);
  f.c0 = ya - d01 * xa + c2 * xa * x0;
  return f;
}

GPUMEMPROF_NAMESPACE_END
