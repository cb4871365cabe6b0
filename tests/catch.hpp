// Test-side shim: Catch2 v2 (Debian's single header) or v3 (other distributions, the GPU host).
// Write string matchers as Catch::Matchers::ContainsSubstring (v3's name; v2 gets it below).
// v2's spellings Contains, Catch::Matchers::Contains and Catch::Contains also compile with both.
#pragma once
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>  // from_range (v2 has it in catch.hpp)
#include <catch2/matchers/catch_matchers_all.hpp>
using Catch::Approx;
// v2 also has the matchers in namespace Catch (Catch::Contains).
namespace Catch {
using Matchers::ContainsSubstring;
}  // namespace Catch
// v2's string matcher Contains is ContainsSubstring in v3 (v3's Contains matches ranges). The
// tests only match strings, so map the name after Catch's own headers are in.
#define Contains ContainsSubstring
#else
#include <catch2/catch.hpp>
namespace Catch::Matchers {
/// v3's name of v2's string matcher Contains.
inline StdString::ContainsMatcher ContainsSubstring(const std::string& str,
                                                    CaseSensitive::Choice cs = CaseSensitive::Yes) {
  return Contains(str, cs);
}
}  // namespace Catch::Matchers
namespace Catch {
using Matchers::ContainsSubstring;
}  // namespace Catch
#endif
