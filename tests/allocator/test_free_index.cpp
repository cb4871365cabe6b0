// The free-block index against a std::set reference: same (size, address) order, same best fit.
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/free_index.hpp"

namespace gmp = gpumemprof;
using Block = gmp::detail::Block;

TEST_CASE("HierarchicalBitmap next/prev agree with a linear scan") {
  constexpr std::size_t n = 300000;  // three levels deep
  gmp::detail::HierarchicalBitmap bm(n);
  std::vector<bool> ref(n, false);
  std::mt19937_64 rng(42);
  auto check_at = [&](std::size_t i) {
    std::size_t want_next = gmp::detail::HierarchicalBitmap::npos;
    for (std::size_t j = i; j < n; ++j) {
      if (ref[j]) {
        want_next = j;
        break;
      }
    }
    std::size_t want_prev = gmp::detail::HierarchicalBitmap::npos;
    for (std::size_t j = i + 1; j-- > 0;) {
      if (ref[j]) {
        want_prev = j;
        break;
      }
    }
    REQUIRE(bm.next(i) == want_next);
    REQUIRE(bm.prev(i) == want_prev);
  };
  check_at(0);
  check_at(n - 1);
  for (int round = 0; round < 2000; ++round) {
    const std::size_t i = rng() % n;
    if (ref[i]) {
      bm.clear(i);
    } else {
      bm.set(i);
    }
    ref[i] = !ref[i];
    if (round % 20 == 0) check_at(rng() % n);
  }
  for (std::size_t i : {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{4095}, std::size_t{4096},
                        std::size_t{262143}, std::size_t{262144}, n - 1}) {
    check_at(i);
  }
}

TEST_CASE("FreeIndex keeps PyTorch's (size, address) order across bins and the big-block tree") {
  constexpr std::size_t limit = 64 * 512;  // small limit so both bins and the tree are exercised
  gmp::detail::FreeIndex<Block> index(limit);
  std::vector<Block> nodes(3000);
  std::set<std::pair<std::size_t, std::uintptr_t>> ref;
  std::vector<bool> in(nodes.size(), false);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].size = 512 * (1 + rng() % 100);                 // sizes on both sides of the limit, many equal
    nodes[i].addr = 4096 * (1 + rng() % 1000000) + i * 512;  // distinct
  }
  for (int step = 0; step < 20000; ++step) {
    const std::size_t i = rng() % nodes.size();
    if (in[i]) {
      index.erase(&nodes[i]);
      ref.erase({nodes[i].size, nodes[i].addr});
    } else {
      index.insert(&nodes[i]);
      ref.insert({nodes[i].size, nodes[i].addr});
    }
    in[i] = !in[i];
    const std::size_t want = 512 * (rng() % 110);
    const Block* got = index.lower_bound(want);
    const auto it = ref.lower_bound({want, 0});
    if (it == ref.end()) {
      REQUIRE(got == nullptr);
    } else {
      REQUIRE(got != nullptr);
      REQUIRE(got->size == it->first);
      REQUIRE(got->addr == it->second);
    }
  }
  index.check();
  REQUIRE(index.size() == ref.size());
  // Full walks both ways.
  auto it = ref.begin();
  for (Block* b = index.first(); b != nullptr; b = index.next(b), ++it) {
    REQUIRE(it != ref.end());
    REQUIRE(std::make_pair(b->size, b->addr) == *it);
  }
  REQUIRE(it == ref.end());
  auto rit = ref.rbegin();
  for (Block* b = index.last(); b != nullptr; b = index.prev(b), ++rit) {
    REQUIRE(rit != ref.rend());
    REQUIRE(std::make_pair(b->size, b->addr) == *rit);
  }
  REQUIRE(rit == ref.rend());
  for (std::size_t i = 0; i < nodes.size(); ++i) REQUIRE(index.contains(&nodes[i]) == in[i]);
}
