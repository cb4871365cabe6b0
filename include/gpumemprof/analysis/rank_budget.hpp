// Analysis layer: memory budgets across the ranks of a multi-process run. Given one MemoryStats
// per rank (what gpumemprof::mpi::gather_memory_stats returns on rank 0, in rank order), which
// rank peaked highest and lowest, and how unequal the peaks are:
//
//   const auto all = gmp::mpi::gather_memory_stats("cuda:0");
//   if (rank == 0) {
//     REQUIRE(gmp::largest_peak(all).bytes <= 40_GiB);           // any Catch2 matcher works on
//     REQUIRE_THAT(gmp::peak_imbalance(all), Catch::Matchers::WithinAbs(1.0, 0.05));  // these
//   }
//
// Peaks are allocated_bytes.all.peak (PyTorch's max_memory_allocated) unless the reserved bytes
// (max_memory_reserved) are asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Which peak a cross-rank budget reads.
enum class PeakOf : std::uint8_t {
  allocated,  ///< allocated_bytes.all.peak (max_memory_allocated)
  reserved,   ///< reserved_bytes.all.peak (max_memory_reserved)
};

/// One rank's peak (bytes).
struct RankPeak {
  int rank = -1;
  std::int64_t bytes = 0;
  friend bool operator==(const RankPeak&, const RankPeak&) = default;
};

[[nodiscard]] inline std::int64_t peak_of(const MemoryStats& s, PeakOf which) noexcept {
  return which == PeakOf::allocated ? s.allocated_bytes.all().peak : s.reserved_bytes.all().peak;
}

namespace detail {
template <class Better>
RankPeak pick_rank(const std::vector<MemoryStats>& ranks, PeakOf which, Better better) {
  if (ranks.empty()) throw std::invalid_argument("no ranks: gather_memory_stats returns them on rank 0 only");
  RankPeak best{0, peak_of(ranks[0], which)};
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    const std::int64_t b = peak_of(ranks[r], which);
    if (better(b, best.bytes)) best = RankPeak{static_cast<int>(r), b};
  }
  return best;
}
}  // namespace detail

/// The rank with the highest peak (the lowest rank on a tie). Throws std::invalid_argument
/// when `ranks` is empty.
[[nodiscard]] inline RankPeak largest_peak(const std::vector<MemoryStats>& ranks, PeakOf which = PeakOf::allocated) {
  return detail::pick_rank(ranks, which, [](std::int64_t a, std::int64_t b) { return a > b; });
}

/// The rank with the lowest peak (the lowest rank on a tie).
[[nodiscard]] inline RankPeak smallest_peak(const std::vector<MemoryStats>& ranks, PeakOf which = PeakOf::allocated) {
  return detail::pick_rank(ranks, which, [](std::int64_t a, std::int64_t b) { return a < b; });
}

/// Largest peak / smallest peak: 1.0 when every rank peaks alike. A rank that allocated nothing
/// while another did makes it infinite; 1.0 when no rank allocated anything.
[[nodiscard]] inline double peak_imbalance(std::int64_t largest, std::int64_t smallest) noexcept {
  if (largest <= 0) return 1.0;
  if (smallest <= 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(largest) / static_cast<double>(smallest);
}

[[nodiscard]] inline double peak_imbalance(const std::vector<MemoryStats>& ranks, PeakOf which = PeakOf::allocated) {
  return peak_imbalance(largest_peak(ranks, which).bytes, smallest_peak(ranks, which).bytes);
}

GPUMEMPROF_NAMESPACE_END
