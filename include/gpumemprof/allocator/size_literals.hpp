// Layer 2: byte-count literals for budgets and requests: 64_MiB, 512_KiB, 2_GiB.
//
//   using namespace gpumemprof::literals;
//   void* p = alloc.allocate(64_MiB);
#pragma once

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {
// consteval: a count that overflows 64 bits is a compile error, not a wrapped budget.
consteval unsigned long long size_literal(unsigned long long n, int shift) {
  if (n > (~0ULL >> shift)) throw "gpumemprof size literal overflows 64 bits";
  return n << shift;
}
}  // namespace detail

namespace literals {

/// n KiB in bytes (1 KiB = 1024 bytes).
[[nodiscard]] consteval unsigned long long operator""_KiB(unsigned long long n) { return detail::size_literal(n, 10); }
/// n MiB in bytes.
[[nodiscard]] consteval unsigned long long operator""_MiB(unsigned long long n) { return detail::size_literal(n, 20); }
/// n GiB in bytes.
[[nodiscard]] consteval unsigned long long operator""_GiB(unsigned long long n) { return detail::size_literal(n, 30); }

}  // namespace literals
GPUMEMPROF_NAMESPACE_END
