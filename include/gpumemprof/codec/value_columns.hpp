// Layer 0 (codecs): columns of values for the reports' embedded data -- `"k":[v, ...]` from a list, plain or
// delta-coded -- written through a ValueWriter (the HTML report, the cross-rank page).
#pragma once

#include <cstdint>
#include <string_view>

#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// `"k":[get(x) for x in items]`.
template <class Items, class Get>
void write_column(ValueWriter& w, std::string_view k, const Items& items, Get get) {
  w.key(k);
  w.begin_list();
  for (const auto& x : items) w.value(get(x));
  w.end_list();
}

/// Like write_column(), each value written as its difference to the previous one (the first to
/// 0): growing values (states, times, addresses) then take a few digits each.
template <class Items, class Get>
void write_delta_column(ValueWriter& w, std::string_view k, const Items& items, Get get) {
  std::int64_t prev = 0;
  write_column(w, k, items, [&](const auto& x) {
    const auto v = static_cast<std::int64_t>(get(x));
    const std::int64_t d = v - prev;
    prev = v;
    return d;
  });
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
