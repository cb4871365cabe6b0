// Analysis layer: align_streams()'s bodies (stream_alignment.hpp declares them and describes the
// walk). Included by that header in header-only mode; compiled once in the library
// (lib/analysis.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/analysis/stream_alignment.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

class StreamAligner {
 public:
  StreamAligner(const RequestStream& ref, double p_ref, const RequestStream& other, double p_other,
                const AlignmentOptions& options)
      : a_(ref.requests), b_(other.requests), opt_(options) {
    const double q = p_ref / p_other;
    factors_[0] = 1.0;
    factors_[1] = q;
    factors_[2] = q * q;
    ka_.reserve(a_.size());
    for (const ProbeRequest& r : a_) ka_.push_back(r.key());
    kb_.reserve(b_.size());
    for (const ProbeRequest& r : b_) kb_.push_back(r.key());
    out_.other_of.assign(a_.size(), StreamAlignment::kUnmatched);
    out_.other_requests = b_.size();
  }

  StreamAlignment run() {
    std::size_t i = 0;
    std::size_t j = 0;
    while (i < a_.size() && j < b_.size()) {
      if (work_ > opt_.work_limit) {
        out_.complete = false;
        break;
      }
      if (agree(i, j) && confirmed(i, j)) {
        match(i++, j++);
        continue;
      }
      std::pair<std::size_t, std::size_t> next = near_resync(i, j);
      if (next.first == kNone || std::min(a_.size() - next.first, b_.size() - next.second) < kRun) {
        // Nothing runs together within the window, or only the few pairs before an end (which
        // can agree by coincidence): a dense common subsequence is the better evidence.
        const std::pair<std::size_t, std::size_t> dense = dense_resync(i, j);
        if (dense.first != kNone) next = dense;
      }
      if (next.first == kNone) next = far_resync(i, j);
      if (next.first == kNone) break;
      pair_block(i, next.first, j, next.second);
      i = next.first;
      j = next.second;
    }
    if (out_.complete) pair_block(i, a_.size(), j, b_.size());  // the tails
    divergences();
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  static constexpr std::size_t kRun = 16;      // pairs looked at after a resynchronisation point
  static constexpr std::size_t kRunNeed = 12;  // ... of which this many must agree

  bool agree(std::size_t i, std::size_t j) {
    ++work_;
    if (ka_[i] != kb_[j]) return false;
    const double want = static_cast<double>(a_[i].size);
    for (const double f : factors_) {
      const double got = static_cast<double>(b_[j].size) * f;
      if (std::fabs(want - got) <= got / 256.0 + 0.5) return true;
    }
    return false;
  }

  /// Whether one of the next two pairs after an agreeing (i, j) agrees too (or a stream ends): a
  /// pair that agrees by coincidence -- the other probe lacks request i, and its next request has
  /// a size that happens to agree -- is followed by pairs that do not.
  bool confirmed(std::size_t i, std::size_t j) {
    for (std::size_t t = 1; t <= 2; ++t) {
      if (i + t >= a_.size() || j + t >= b_.size() || agree(i + t, j + t)) return true;
    }
    return false;
  }

  /// How many of the kRun pairs from (i, j) agree; 0 unless the first does. Near an end, where
  /// fewer pairs are left, all of them must agree.
  std::size_t run_quality(std::size_t i, std::size_t j) {
    if (i >= a_.size() || j >= b_.size() || !agree(i, j)) return 0;
    const std::size_t left = std::min({kRun, a_.size() - i, b_.size() - j});
    std::size_t n = 1;
    for (std::size_t t = 1; t < left; ++t) n += agree(i + t, j + t) ? 1 : 0;
    if (left < kRun) return n == left ? kRunNeed : 0;
    return n >= kRunNeed ? n : 0;
  }

  /// The place within the window where the streams run together again: the nearest one (by max of
  /// the two skips) or one up to 4 farther whose next pairs agree more (a place too near can agree
  /// by coincidence for a few pairs); among equals, the nearer, then the one with fewer skips.
  std::pair<std::size_t, std::size_t> near_resync(std::size_t i, std::size_t j) {
    std::size_t best_q = 0;
    std::size_t last_c = opt_.window;
    std::pair<std::size_t, std::size_t> best{kNone, kNone};
    for (std::size_t c = 1; c <= last_c; ++c) {
      for (std::size_t d = 0; d <= c; ++d) {
        const std::pair<std::size_t, std::size_t> cand[2] = {{i + c, j + c - d}, {i + c - d, j + c}};
        for (int s = 0; s < (d == 0 ? 1 : 2); ++s) {
          const std::size_t quality = run_quality(cand[s].first, cand[s].second);
          if (quality > best_q) {
            if (best_q == 0) last_c = std::min(opt_.window, c + 4);
            best_q = quality;
            best = cand[s];
          }
        }
      }
      if (i + c >= a_.size() && j + c >= b_.size()) break;
    }
    return best;
  }

  /// Where no place within the window runs together for kRun pairs because requests are inserted
  /// or reordered every few requests (one probe's kernels take an extra workspace in every layer),
  /// the longest common subsequence of agreeing pairs over the next window of both streams. When
  /// it pairs at least half of the shorter side, the streams are together, only edited densely:
  /// the place after its last pair in the first half of the window is where the walk goes on (the
  /// caller pairs the requests before it) -- or, where both streams end within the window, the
  /// ends: the rest is paired as one block.
  std::pair<std::size_t, std::size_t> dense_resync(std::size_t i, std::size_t j) {
    const std::size_t x = std::min(opt_.window, a_.size() - i);
    const std::size_t y = std::min(opt_.window, b_.size() - j);
    std::vector<std::uint32_t> score((x + 1) * (y + 1), 0);
    auto at = [&](std::size_t r, std::size_t c) -> std::uint32_t& { return score[r * (y + 1) + c]; };
    for (std::size_t r = x; r-- > 0;) {
      for (std::size_t c = y; c-- > 0;) {
        at(r, c) = std::max({at(r + 1, c), at(r, c + 1), agree(i + r, j + c) ? at(r + 1, c + 1) + 1 : 0u});
      }
    }
    if (2 * static_cast<std::size_t>(at(0, 0)) < std::min(x, y)) return {kNone, kNone};
    if (i + x == a_.size() && j + y == b_.size()) return {a_.size(), b_.size()};
    std::pair<std::size_t, std::size_t> cut{kNone, kNone};
    std::size_t r = 0;
    std::size_t c = 0;
    while (r < x / 2 && c < y) {
      if (at(r, c) != 0 && at(r, c) == at(r + 1, c + 1) + 1 && agree(i + r, j + c)) {
        cut = {i + ++r, j + ++c};
      } else if (at(r, c) == at(r + 1, c)) {
        ++r;
      } else {
        ++c;
      }
    }
    return cut;
  }

  /// Beyond the window: the first later reference request with an agreeing request of the other
  /// probe after j (found by size through an index) where the streams run together again.
  std::pair<std::size_t, std::size_t> far_resync(std::size_t i, std::size_t j) {
    if (index_.empty()) {
      for (std::size_t k = 0; k < b_.size(); ++k) index_[kb_[k] ^ (b_[k].size * 0x9E3779B97F4A7C15ull)].push_back(k);
    }
    for (std::size_t x = i; x < a_.size() && work_ <= opt_.work_limit; ++x) {
      for (const double f : factors_) {
        const double s = std::round(static_cast<double>(a_[x].size) / f);
        if (s < 1.0) continue;
        const auto it = index_.find(ka_[x] ^ (static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull));
        if (it == index_.end()) continue;
        const std::vector<std::size_t>& at = it->second;
        auto p = std::lower_bound(at.begin(), at.end(), j);
        for (int tries = 0; p != at.end() && tries < 4; ++p, ++tries) {
          if (run_quality(x, *p) != 0) return {x, *p};
        }
      }
    }
    return {kNone, kNone};
  }

  /// Pairs reference requests [i0, i1) with the other's [j0, j1): a longest common subsequence
  /// over equal keys, agreeing pairs counting double. Blocks longer than the window stay unmatched.
  void pair_block(std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) {
    const std::size_t x = i1 - i0;
    const std::size_t y = j1 - j0;
    if (x == 0 || y == 0 || x > opt_.window || y > opt_.window) return;
    std::vector<std::uint32_t> score((x + 1) * (y + 1), 0);
    auto at = [&](std::size_t r, std::size_t c) -> std::uint32_t& { return score[r * (y + 1) + c]; };
    auto gain = [&](std::size_t r, std::size_t c) -> std::uint32_t {
      if (ka_[i0 + r] != kb_[j0 + c]) return 0;
      return agree(i0 + r, j0 + c) ? 2 : 1;
    };
    for (std::size_t r = x; r-- > 0;) {
      for (std::size_t c = y; c-- > 0;) {
        const std::uint32_t g = gain(r, c);
        at(r, c) = std::max({at(r + 1, c), at(r, c + 1), g != 0 ? at(r + 1, c + 1) + g : 0u});
      }
    }
    std::size_t r = 0;
    std::size_t c = 0;
    while (r < x && c < y) {
      const std::uint32_t g = gain(r, c);
      if (g != 0 && at(r, c) == at(r + 1, c + 1) + g) {
        match(i0 + r++, j0 + c++);
      } else if (at(r, c) == at(r + 1, c)) {
        ++r;
      } else {
        ++c;
      }
    }
  }

  void match(std::size_t i, std::size_t j) {
    out_.other_of[i] = static_cast<std::int64_t>(j);
    ++out_.matched;
    if (agree(i, j)) ++out_.agreeing;
  }

  void divergences() {
    std::size_t pi = 0;  // next reference request after the last matched pair
    std::size_t pj = 0;
    auto gap = [&](std::size_t i, std::size_t j) {
      if (i > pi || j > pj) out_.divergences.push_back({pi, i, pj, j});
    };
    for (std::size_t i = 0; i < a_.size(); ++i) {
      if (out_.other_of[i] == StreamAlignment::kUnmatched) continue;
      const auto j = static_cast<std::size_t>(out_.other_of[i]);
      gap(i, j);
      pi = i + 1;
      pj = j + 1;
    }
    gap(a_.size(), b_.size());
  }

  const std::vector<ProbeRequest>& a_;
  const std::vector<ProbeRequest>& b_;
  AlignmentOptions opt_;
  double factors_[3] = {1.0, 1.0, 1.0};
  std::vector<std::uint64_t> ka_, kb_;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> index_;
  std::uint64_t work_ = 0;
  StreamAlignment out_;
};

}  // namespace detail

GPUMEMPROF_FUNC StreamAlignment align_streams(const RequestStream& ref, double p_ref, const RequestStream& other,
                                              double p_other, const AlignmentOptions& options) {
  return detail::StreamAligner(ref, p_ref, other, p_other, options).run();
}

GPUMEMPROF_NAMESPACE_END
