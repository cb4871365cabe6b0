// The two random request streams that gpu_compare replays beside the traces (random_log_uniform,
// random_two_streams), generated from a fixed seed: sizes log-uniform in [1 B, 64 MiB), up to 512
// live blocks, frees in random order. The allocator's tests replay them too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "trace.hpp"

namespace gpumemprof::tools {

/// `allocs` allocations of log-uniform sizes from `seed`; with `streams` > 1 each one goes to
/// stream 1..streams at random. Named random_log_uniform, or random_two_streams with streams > 1.
inline Trace random_log_uniform(std::size_t allocs, unsigned seed, int streams) {
  std::mt19937_64 rng(seed);
  std::string text;
  std::vector<std::uint32_t> live;
  std::uint32_t next = 0;
  while (next < allocs) {
    if (live.size() < 512 && (live.empty() || rng() % 2 == 0)) {
      const double lg = std::uniform_real_distribution<double>(0.0, 26.0)(rng);
      const auto bytes = static_cast<std::uint64_t>(std::exp2(lg));
      const std::uint64_t stream = streams > 1 ? 1 + rng() % static_cast<std::uint64_t>(streams) : 0;
      text += "a " + std::to_string(next) + " " + std::to_string(std::max<std::uint64_t>(bytes, 1)) + " " +
              std::to_string(stream) + "\n";
      live.push_back(next++);
    } else {
      const std::size_t k = rng() % live.size();
      text += "f " + std::to_string(live[k]) + "\n";
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (auto id : live) text += "f " + std::to_string(id) + "\n";
  return parse_trace(text, streams > 1 ? "random_two_streams" : "random_log_uniform");
}

}  // namespace gpumemprof::tools
