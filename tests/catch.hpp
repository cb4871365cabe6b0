// Test-side shim: Catch2 v2 (Debian's single header) or v3 (other distributions, the GPU host).
#pragma once
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_all.hpp>
using Catch::Approx;
// v2's string matcher Contains is ContainsSubstring in v3 (v3's Contains matches ranges). The
// tests only match strings, so map the name after Catch's own headers are in.
#define Contains ContainsSubstring
#else
#include <catch2/catch.hpp>
#endif
