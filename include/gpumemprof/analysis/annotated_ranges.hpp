// Analysis layer: a device's annotated ranges (external annotations, START/END by name) as
// intervals -- what the category rules' `scope` patterns and the timeline's bands look at.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One annotated range [t0, t1) in microseconds; t1 is the largest time when it never ended.
/// Which trace entries it holds is decided by the recorder's order where the snapshot keeps it
/// (Annotation::trace_index: entries [i0, i1) of the device's trace), else by time: entries and
/// annotations of one microsecond share a time_us, so only the order tells them apart.
struct AnnotatedRange {
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  std::string name;
  std::int64_t t0 = 0;
  std::int64_t t1 = kNever;
  std::int64_t i0 = -1;      ///< the first trace entry inside; -1: not known (placed by time)
  std::int64_t i1 = kNever;  ///< one past the last entry inside (kNever: to the end)
  [[nodiscard]] bool open() const noexcept { return t1 == kNever; }
  [[nodiscard]] bool ordered() const noexcept { return i0 >= 0; }
  /// Whether trace entry number `index`, at `time_us`, lies inside.
  [[nodiscard]] bool holds(std::size_t index, std::int64_t time_us) const noexcept {
    if (ordered()) return i0 <= static_cast<std::int64_t>(index) && static_cast<std::int64_t>(index) < i1;
    return t0 <= time_us && time_us < t1;
  }
};

/// Ranges in the order they began (by the recorder's order where both know it).
[[nodiscard]] inline bool began_before(const AnnotatedRange& a, const AnnotatedRange& b) noexcept {
  if (a.t0 != b.t0) return a.t0 < b.t0;
  return a.ordered() && b.ordered() && a.i0 < b.i0;
}

/// The ranges of `device`: an END closes the innermost open START of its name (an END without
/// one is dropped); ranges still open at the end come last.
[[nodiscard]] inline std::vector<AnnotatedRange> annotated_ranges(const std::vector<Annotation>& annotations,
                                                                    int device) {
  std::vector<AnnotatedRange> out;
  std::vector<AnnotatedRange> open;
  for (const Annotation& a : annotations) {
    if (a.device != device) continue;
    if (a.start) {
      open.push_back({a.name, a.time_us, AnnotatedRange::kNever, a.trace_index});
      continue;
    }
    const auto it = std::find_if(open.rbegin(), open.rend(), [&](const AnnotatedRange& r) { return r.name == a.name; });
    if (it == open.rend()) continue;  // its START was not recorded
    AnnotatedRange r = *it;
    r.t1 = a.time_us;
    if (a.trace_index >= 0) {
      r.i1 = a.trace_index;
    } else {
      r.i0 = -1;  // an end the recorder did not place: the range goes by time
    }
    out.push_back(std::move(r));
    open.erase(std::next(it).base());
  }
  out.insert(out.end(), open.begin(), open.end());
  return out;
}

GPUMEMPROF_NAMESPACE_END
