// Analysis layer: aligning the request streams of two probes -- the same program run at two sizes
// of one parameter (batch size, sequence length) issues mostly the same requests in the same
// order, with other sizes, plus some that only one run makes (cuDNN and cuBLAS workspaces,
// kernels chosen by size). The alignment says which request of the other probe each request of
// the reference probe is.
//
// Two requests can be the same when their key is (stream, user's frame, category:
// request_stream.hpp). They *agree* when, in addition, the reference's size is the other's times
// 1, q or q^2 (q = reference parameter / other parameter; within 1/256 of the size): a constant,
// a size proportional to the parameter or to its square. The walk is a diff that never compares
// whole streams with each other (no O(n*m) table):
//   - while the two requests under the cursors agree, and one of the next two pairs does too,
//     they are matched and both cursors move on;
//   - at a disagreement it looks for the nearest place where the streams run together again --
//     offsets (x, y) of the two cursors, nearest first by max(x, y), within a window -- where at
//     least 12 of the next 16 pairs agree, the first one included;
//   - where no such place exists -- requests inserted or reordered every few requests, as when one
//     probe's kernels take an extra workspace in every layer -- or only the last few pairs before
//     an end agree, the longest common subsequence of agreeing pairs over the next window of both
//     streams decides: when it pairs at least half of the shorter side, the walk goes on after its
//     last pair in the first half of the window (or pairs the rest, where both streams end within
//     the window);
//   - beyond the window, an index of the other stream by (key, size) finds a place where a later
//     reference request agrees (its size, its size / q or / q^2), checked the same way;
//   - the requests skipped over on both sides (at most a window each) are paired by a small
//     longest-common-subsequence over their keys, preferring pairs that agree: a request whose
//     size changed in another way (affine, data-dependent) stays matched; the rest are unmatched.
// Work is bounded (AlignmentOptions::work_limit comparisons): two unrelated programs end the
// walk with the rest unmatched, and `complete` false, rather than a long search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct AlignmentOptions {
  std::size_t window = 256;                ///< how far (in requests) a resynchronisation is looked for
  std::uint64_t work_limit = 600'000'000;  ///< comparisons before the walk gives up
};

/// A stretch where the streams differ: reference requests [ref_begin, ref_end) and the other
/// probe's [other_begin, other_end) are unmatched (either range may be empty).
struct StreamDivergence {
  std::size_t ref_begin = 0, ref_end = 0;
  std::size_t other_begin = 0, other_end = 0;
};

struct StreamAlignment {
  static constexpr std::int64_t kUnmatched = -1;
  std::vector<std::int64_t> other_of;  ///< per reference request: the other's index, or kUnmatched
  std::size_t matched = 0;             ///< reference requests with a counterpart
  std::size_t agreeing = 0;            ///< ... whose sizes agree (1, q or q^2)
  std::size_t other_requests = 0;
  std::vector<StreamDivergence> divergences;  ///< in stream order
  bool complete = true;                       ///< false when the walk stopped at work_limit (the rest is unmatched)
};

/// Aligns `other` (recorded at parameter `p_other`) to `ref` (at `p_ref`); see the file comment.
[[nodiscard]] StreamAlignment align_streams(const RequestStream& ref, double p_ref, const RequestStream& other,
                                            double p_other, const AlignmentOptions& options = {});

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/stream_alignment-inl.hpp"
#endif
