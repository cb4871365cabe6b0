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
using Reference = std::set<std::pair<std::size_t, std::uintptr_t>>;

namespace {
// Full walks both ways give the reference's (size, address) order.
void require_same_order(const gmp::detail::FreeIndex<Block>& index, const Reference& ref) {
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
}
// lower_bound(want) is the reference's best fit: the smallest size >= want, lowest address.
void require_best_fit(const gmp::detail::FreeIndex<Block>& index, const Reference& ref, std::size_t want) {
  const Block* got = index.lower_bound(want);
  const auto it = ref.lower_bound({want, 0});
  if (it == ref.end()) {
    REQUIRE(got == nullptr);
  } else {
    REQUIRE(got != nullptr);
    REQUIRE(std::make_pair(got->size, got->addr) == *it);
  }
}
}  // namespace

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
  Reference ref;
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
    require_best_fit(index, ref, 512 * (rng() % 110));
  }
  index.check();
  REQUIRE(index.size() == ref.size());
  require_same_order(index, ref);
  for (std::size_t i = 0; i < nodes.size(); ++i) REQUIRE(index.contains(&nodes[i]) == in[i]);
}

// Bins that hold zero, one or two blocks take the store-only paths (a block filed into an empty
// bin, the only block leaving its bin) and the tree paths in turn; every step is checked against
// the reference order, with equal sizes at distinct addresses and sizes far beyond the bins.
TEST_CASE("FreeIndex bins moving between empty, one block and several keep (size, address) order") {
  constexpr std::size_t limit = 8 * 512;
  gmp::detail::FreeIndex<Block> index(limit);
  std::vector<Block> nodes(12);
  Reference ref;
  // Three blocks of each of two bin sizes, addresses deliberately not in insertion order; two
  // at the last bin; four big ones (two equal, one of 1 TiB).
  const std::size_t sizes[] = {
      512, 512, 512, 2048, 2048, 2048, limit, limit, 16384, 16384, std::size_t{1} << 40, 4096 + limit};
  const std::uintptr_t addrs[] = {0x9000, 0x1000, 0x5000, 0x7000, 0x3000, 0xB000,
                                  0x2000, 0x1000, 0x8000, 0x4000, 0x6000, 0xA000};
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].size = sizes[i];
    nodes[i].addr = addrs[i];
  }
  auto check = [&] {
    index.check();
    REQUIRE(index.size() == ref.size());
    require_same_order(index, ref);
    for (std::size_t want : {std::size_t{0}, std::size_t{512}, std::size_t{513}, std::size_t{2048}, limit, limit + 1,
                             std::size_t{16384}, std::size_t{1} << 40, (std::size_t{1} << 40) + 1}) {
      require_best_fit(index, ref, want);
    }
  };
  auto insert = [&](std::size_t i) {
    index.insert(&nodes[i]);
    ref.insert({nodes[i].size, nodes[i].addr});
    check();
  };
  auto erase = [&](std::size_t i) {
    index.erase(&nodes[i]);
    ref.erase({nodes[i].size, nodes[i].addr});
    REQUIRE_FALSE(index.contains(&nodes[i]));
    check();
  };
  // One block per bin, then emptied again: only the store-only paths.
  insert(0);
  insert(3);
  insert(6);
  erase(3);
  erase(0);
  erase(6);
  REQUIRE(index.empty());
  REQUIRE(index.first() == nullptr);
  // Bins filled to three blocks and emptied: a root with two children (0x5000, 0x7000 after
  // the inserts), a leaf, a root with one child, and the last block of a bin.
  for (std::size_t i : {0, 1, 2, 3, 4, 5, 6, 7}) insert(i);
  erase(2);  // 512 B: the root, two children
  erase(1);  // now a leaf under 0x9000
  erase(0);  // the bin's last block
  insert(2);
  insert(1);
  erase(2);
  erase(1);
  for (std::size_t i : {4, 3, 5}) erase(i);  // 2048 B: a leaf, the root with one child, the last
  erase(7);
  erase(6);
  // Big blocks beside the bins: equal sizes by address, 1 TiB at the end.
  for (std::size_t i : {8, 9, 10, 11, 0}) insert(i);
  erase(9);
  erase(10);
  erase(0);
  erase(8);
  erase(11);
  REQUIRE(index.empty());
}
