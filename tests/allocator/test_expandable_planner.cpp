// The expandable-segments planner on synthetic layouts, without an allocator: where growth goes,
// which holes it maps, how many bytes of pages it takes back and from where.
#include <string_view>
#include <vector>

#include "catch.hpp"
#include "../units.hpp"
#include "gpumemprof/allocator/expandable_planner.hpp"

namespace {

namespace d = gpumemprof::detail;
using gpumemprof::Stream;

constexpr std::size_t kPage = 2 * MiB;

// A reservation at `base` from a picture: one letter a block -- A allocated, P pending (waiting
// for another stream), F free and mapped, H an unmapped hole -- each `sizes[i]` MiB (may be
// fractional pages: blocks need not end on page boundaries, holes do).
d::PlannedSegment segment(std::uintptr_t base, std::string_view kinds, const std::vector<double>& sizes,
                          Stream stream = {}, bool small = false) {
  d::PlannedSegment s;
  s.stream = stream;
  s.small_pool = small;
  std::uintptr_t at = base;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const auto bytes = static_cast<std::size_t>(sizes.at(i) * static_cast<double>(MiB));
    s.blocks.push_back({at, bytes, kinds[i] != 'H', kinds[i] == 'F' || kinds[i] == 'H'});
    at += bytes;
  }
  s.end = at;
  return s;
}

constexpr std::uintptr_t kBase1 = std::uintptr_t{1} << 40;
constexpr std::uintptr_t kBase2 = std::uintptr_t{2} << 40;

d::ExpandableLayout layout(std::vector<d::PlannedSegment> segs) { return d::ExpandableLayout{kPage, std::move(segs)}; }

bool same(const std::vector<d::UnmapStep>& got, const std::vector<d::UnmapStep>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].segment != want[i].segment || got[i].block_addr != want[i].block_addr || got[i].addr != want[i].addr ||
        got[i].bytes != want[i].bytes)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("expandable planner: growth goes where the fewest hole bytes must be mapped") {
  // [A 4][F 2][H 6][A 2][F 4][H 1000] (MiB): 5 MiB fit at 4 (F 2 and 3 of H 6: 4 MiB of the hole
  // mapped, to the page boundary) or at 14 (F 4 and 1 of the tail hole: one 2 MiB page); 14 wins.
  const auto l = layout({segment(kBase1, "AFHAFH", {4, 2, 6, 2, 4, 1000})});
  auto place = d::find_growth_place(l, Stream{}, false, 5 * MiB);
  REQUIRE(place);
  CHECK(place->segment == 0);
  CHECK(place->block == 4);
  CHECK(place->need == 2 * MiB);
  const auto maps = d::pages_to_map(l.segments[0], place->block, 5 * MiB, kPage);
  REQUIRE(maps.size() == 1);
  CHECK(maps[0].addr == kBase1 + 18 * MiB);
  CHECK(maps[0].bytes == 2 * MiB);
  // 7 MiB: at 4 it maps 6 (to the page boundary at 12), at 14 it maps 4: 14 wins again.
  place = d::find_growth_place(l, Stream{}, false, 7 * MiB);
  REQUIRE(place);
  CHECK(place->block == 4);
  CHECK(place->need == 4 * MiB);
  // 2 MiB fit the free mapped block at 4 without mapping: the free trees find that; the planner
  // offers no place that maps nothing, and no place starting at a hole behind a free block.
  CHECK_FALSE(d::find_growth_place(l, Stream{}, false, 2 * MiB));
}

TEST_CASE("expandable planner: only the request's stream and pool; a run must hold the request") {
  const Stream s1(1);
  auto l = layout({segment(kBase1, "AFH", {2, 2, 4}), segment(kBase2, "H", {64}, s1)});
  // 10 MiB do not fit stream 0's reservation (its end is 8 MiB in): stream 1's is not looked at.
  CHECK_FALSE(d::find_growth_place(l, Stream{}, false, 10 * MiB));
  CHECK_FALSE(d::find_growth_place(l, Stream{}, true, 2 * MiB));  // no small-pool reservation
  auto place = d::find_growth_place(l, s1, false, 10 * MiB);
  REQUIRE(place);
  CHECK(place->segment == 1);
  CHECK(place->block == 0);
  CHECK(place->need == 10 * MiB);
  // A pending block ends a run as an allocated one does: nothing fits before it.
  l = layout({segment(kBase1, "FHPH", {2, 2, 2, 10})});
  place = d::find_growth_place(l, Stream{}, false, 5 * MiB);
  REQUIRE(place);
  CHECK(place->block == 3);
  CHECK(place->need == 6 * MiB);
}

TEST_CASE("expandable planner: a run starts at its first block, not at a hole behind a free mapped block") {
  // [F 2][H 4][A 2]: 3 MiB from the free block (mapping one page of the hole), not from the hole.
  const auto l = layout({segment(kBase1, "FHA", {2, 4, 2})});
  const auto place = d::find_growth_place(l, Stream{}, false, 3 * MiB);
  REQUIRE(place);
  CHECK(place->block == 0);
  CHECK(place->need == 2 * MiB);
  const auto maps = d::pages_to_map(l.segments[0], 0, 3 * MiB, kPage);
  REQUIRE(maps.size() == 1);
  CHECK(maps[0].addr == kBase1 + 2 * MiB);
  CHECK(maps[0].bytes == 2 * MiB);  // [2, 4): up to the page boundary past 3 MiB
}

TEST_CASE("expandable planner: several holes in one run are each mapped up to the request's last page") {
  // [H 2][F 2][H 6]: 9 MiB from 0 maps the first hole whole and 4 MiB of the second (to 10 MiB).
  const auto l = layout({segment(kBase1, "HFH", {2, 2, 6})});
  const auto maps = d::pages_to_map(l.segments[0], 0, 9 * MiB, kPage);
  REQUIRE(maps.size() == 2);
  CHECK(maps[0].addr == kBase1);
  CHECK(maps[0].bytes == 2 * MiB);
  CHECK(maps[1].addr == kBase1 + 4 * MiB);
  CHECK(maps[1].bytes == 6 * MiB);
  const auto part = d::pages_to_map(l.segments[0], 0, 5 * MiB, kPage);
  REQUIRE(part.size() == 2);
  CHECK(part[1].bytes == 2 * MiB);  // [4, 6): the page holding byte 5 MiB
}

TEST_CASE("expandable planner: the budget lets fresh pages in up to the slack, then takes pages back") {
  d::GrowthBudget g;
  g.page = kPage;
  g.live_high = 100 * MiB;
  g.slack = 0.1;  // budget 110 MiB
  g.reserved = 100 * MiB;
  g.need = 8 * MiB;
  CHECK(d::bytes_to_recycle(g) == 0);  // 108 <= 110
  g.need = 16 * MiB;
  CHECK(d::bytes_to_recycle(g) == 6 * MiB);  // 116 - 110, in whole pages
  g.reserved = 109 * MiB;
  g.need = 4 * MiB;
  CHECK(d::bytes_to_recycle(g) == 4 * MiB);  // 3 over, rounded up to pages: 4
  g.need = 2 * MiB;
  g.reserved = 200 * MiB;
  CHECK(d::bytes_to_recycle(g) == 2 * MiB);  // never more than the growth maps
  // Within the slack, the device's free memory and the memory fraction still bound fresh pages.
  g.reserved = 100 * MiB;
  g.need = 8 * MiB;
  g.device_free = 4 * MiB;
  CHECK(d::bytes_to_recycle(g) == 4 * MiB);
  g.device_free = 1024 * MiB;
  g.allowed_max = 102 * MiB;
  CHECK(d::bytes_to_recycle(g) == 6 * MiB);
}

TEST_CASE("expandable planner: pages come back from the largest free blocks first, their top pages") {
  // Stream 0: [F 6.5][A 2][F 4][A 1.5][H 4]; stream 1: [F 4][A 2][H 10]. Whole pages of free
  // mapped blocks: [0, 6) of the first (its top half page is no whole page), [10, 12) of the
  // second, all 4 MiB of stream 1's.
  const auto l = layout({segment(kBase1, "FAFAH", {6.5, 2, 4, 1.5, 4}), segment(kBase2, "FAH", {4, 2, 10}, Stream(1))});
  // The growth at stream 1's hole [6, 16): nothing beside it is free and mapped.
  const std::uintptr_t keep = kBase2 + 6 * MiB;
  CHECK(d::pages_to_unmap(l, 0, keep, keep + 8 * MiB).empty());
  CHECK(same(d::pages_to_unmap(l, 4 * MiB, keep, keep + 8 * MiB), {{0, kBase1, kBase1 + 2 * MiB, 4 * MiB}}));
  CHECK(same(d::pages_to_unmap(l, 8 * MiB, keep, keep + 8 * MiB),
             {{0, kBase1, kBase1, 6 * MiB}, {1, kBase2, kBase2 + 2 * MiB, 2 * MiB}}));
  // Asking for more than there is gives what there is.
  CHECK(same(d::pages_to_unmap(l, 64 * MiB, keep, keep + 8 * MiB),
             {{0, kBase1, kBase1, 6 * MiB},
              {1, kBase2, kBase2, 4 * MiB},
              {0, kBase1 + 17 * MiB / 2, kBase1 + 10 * MiB, 2 * MiB}}));
}

TEST_CASE("expandable planner: the free block the growth ends in gives its pages above it, last") {
  // [F 2][A 2][H 2][F 10]: a 4 MiB growth at the hole [4, 6) ends inside the free block [6, 16);
  // its pages from 8 up may go, after every other block's; the block before the growth stays.
  const auto l = layout({segment(kBase1, "FAHF", {2, 2, 2, 10})});
  const std::uintptr_t begin = kBase1 + 4 * MiB;
  CHECK(same(d::pages_to_unmap(l, 12 * MiB, begin, begin + 4 * MiB),
             {{0, kBase1, kBase1, 2 * MiB}, {0, kBase1 + 6 * MiB, kBase1 + 8 * MiB, 8 * MiB}}));
  // The free block the growth starts at gives only pages above the growth: none here.
  const auto m = layout({segment(kBase1, "FH", {4, 12})});
  CHECK(d::pages_to_unmap(m, 8 * MiB, kBase1, kBase1 + 8 * MiB).empty());
}

TEST_CASE("expandable planner: empty_cache releases every whole page of the free mapped blocks") {
  // [F 3][A 1][F 0.5][A 1.5][H 2][F 3.5]: [0, 2) of the first, nothing of the half page, [8, 10)
  // of the last (its top 1.5 MiB is no whole page).
  const auto s = segment(kBase1, "FAFAHF", {3, 1, 0.5, 1.5, 2, 3.5});
  const auto steps = d::pages_to_release(s, 7, kPage);
  CHECK(same(steps, {{7, kBase1, kBase1, 2 * MiB}, {7, kBase1 + 8 * MiB, kBase1 + 8 * MiB, 2 * MiB}}));
}
