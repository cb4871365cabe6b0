// Analysis layer: a device's annotated ranges (external annotations, START/END by name) as
// intervals -- what the category rules' `scope` patterns and the timeline's bands look at.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One annotated range [t0, t1) in microseconds; t1 is the largest time when it never ended.
struct AnnotatedRange {
  std::string name;
  std::int64_t t0 = 0;
  std::int64_t t1 = std::numeric_limits<std::int64_t>::max();
  [[nodiscard]] bool open() const noexcept { return t1 == std::numeric_limits<std::int64_t>::max(); }
};

/// The ranges of `device`: an END closes the innermost open START of its name (an END without
/// one is dropped); ranges still open at the end come last.
[[nodiscard]] inline std::vector<AnnotatedRange> annotated_ranges(const std::vector<Annotation>& annotations,
                                                                    int device) {
  std::vector<AnnotatedRange> out;
  std::vector<AnnotatedRange> open;
  for (const Annotation& a : annotations) {
    if (a.device != device) continue;
    if (a.start) {
      open.push_back({a.name, a.time_us});
      continue;
    }
    const auto it = std::find_if(open.rbegin(), open.rend(), [&](const AnnotatedRange& r) { return r.name == a.name; });
    if (it == open.rend()) continue;  // its START was not recorded
    AnnotatedRange r = *it;
    r.t1 = a.time_us;
    out.push_back(std::move(r));
    open.erase(std::next(it).base());
  }
  out.insert(out.end(), open.begin(), open.end());
  return out;
}

GPUMEMPROF_NAMESPACE_END
