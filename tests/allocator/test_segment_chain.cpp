// SegmentChain alone, on hand-built chains: splits, merges, holes punched and filled, and the
// link checks that catch a broken chain.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpumemprof/allocator/segment_chain.hpp"

// Block's links are private (SegmentChain writes them); the checks below break them on purpose.
GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {
struct BlockTestAccess {
  static Block*& prev(Block& b) { return b.prev_; }
  static Block*& next(Block& b) { return b.next_; }
};
}  // namespace detail
GPUMEMPROF_NAMESPACE_END

namespace segment_chain_tests {

namespace d = gpumemprof::detail;
using Chain = d::SegmentChain;

// A segment at 1 GiB with its records; blank() hands out fresh block records (stable addresses).
struct Bench {
  explicit Bench(std::size_t bytes, bool mapped = true) : span(bytes) {
    seg.addr = GiB;
    seg.size = bytes;
    seg.stream = gpumemprof::Stream(7);
    seg.small_pool = true;
    Chain::start(seg, blank(), bytes, mapped);
  }
  d::Block* blank() { return &records.emplace_back(); }
  // (offset from the segment, size, mapped) of each block, head to tail.
  [[nodiscard]] std::vector<std::tuple<std::size_t, std::size_t, bool>> layout() const {
    std::vector<std::tuple<std::size_t, std::size_t, bool>> out;
    for (const d::Block* b = seg.head; b != nullptr; b = b->next())
      out.emplace_back(b->addr - seg.addr, b->size, b->mapped);
    return out;
  }
  [[nodiscard]] std::string broken() const {
    const char* what = Chain::check_links(seg, span);
    return what == nullptr ? "" : what;
  }
  std::size_t span;  // what check_links() takes as the segment's size
  d::Segment seg;
  std::deque<d::Block> records;
};

using L = std::vector<std::tuple<std::size_t, std::size_t, bool>>;

TEST_CASE("segment chain: a new segment is one block that covers it") {
  Bench c(8 * MiB);
  d::Block* b = c.seg.head;
  CHECK(b->addr == GiB);
  CHECK(b->size == 8 * MiB);
  CHECK(b->segment == &c.seg);
  CHECK(b->stream == c.seg.stream);
  CHECK(b->small_pool);
  CHECK_FALSE(b->is_split());
  CHECK(c.broken().empty());
  CHECK(Chain::finish(c.seg) == b);
  CHECK(c.seg.head == nullptr);
}

TEST_CASE("segment chain: splits keep the tiling, the head and the neighbours' links") {
  Bench c(8 * MiB);
  d::Block* whole = c.seg.head;
  d::Block* front = c.blank();
  Chain::split_front(whole, front, 1 * MiB);  // [front 1][whole 7]
  CHECK(c.seg.head == front);
  CHECK(front->next() == whole);
  CHECK(whole->prev() == front);
  CHECK(front->segment == &c.seg);
  CHECK(front->stream == c.seg.stream);
  CHECK(c.layout() == L{{0, 1 * MiB, true}, {1 * MiB, 7 * MiB, true}});
  CHECK(c.broken().empty());

  d::Block* tail = c.blank();
  Chain::split_back(whole, tail, 2 * MiB);  // [front 1][whole 2][tail 5]
  d::Block* middle = c.blank();
  Chain::split_front(tail, middle, 3 * MiB);  // [front 1][whole 2][middle 3][tail 2]
  CHECK(c.layout() ==
        L{{0, 1 * MiB, true}, {1 * MiB, 2 * MiB, true}, {3 * MiB, 3 * MiB, true}, {6 * MiB, 2 * MiB, true}});
  CHECK(whole->next() == middle);
  CHECK(tail->prev() == middle);
  CHECK(tail->next() == nullptr);
  CHECK(c.broken().empty());
}

TEST_CASE("segment chain: merges absorb either neighbour, the head included") {
  Bench c(8 * MiB);
  d::Block* a = c.blank();
  d::Block* b = c.seg.head;
  d::Block* z = c.blank();
  Chain::split_front(b, a, 2 * MiB);
  Chain::split_back(b, z, 3 * MiB);      // [a 2][b 3][z 3]
  CHECK(Chain::merge(b, z) == 3 * MiB);  // [a 2][b 6]
  CHECK(b->next() == nullptr);
  CHECK(c.layout() == L{{0, 2 * MiB, true}, {2 * MiB, 6 * MiB, true}});
  CHECK(c.broken().empty());
  CHECK(Chain::merge(b, a) == 2 * MiB);  // [b 8]: b is the head again
  CHECK(c.seg.head == b);
  CHECK(b->prev() == nullptr);
  CHECK_FALSE(b->is_split());
  CHECK(c.layout() == L{{0, 8 * MiB, true}});
  CHECK(c.broken().empty());

  // The middle of three merges into the first.
  d::Block* m = c.blank();
  d::Block* t = c.blank();
  Chain::split_back(b, m, 1 * MiB);
  Chain::split_back(m, t, 4 * MiB);  // [b 1][m 4][t 3]
  CHECK(Chain::merge(b, m) == 4 * MiB);
  CHECK(b->next() == t);
  CHECK(t->prev() == b);
  CHECK(c.layout() == L{{0, 5 * MiB, true}, {5 * MiB, 3 * MiB, true}});
  CHECK(c.broken().empty());
}

TEST_CASE("segment chain: holes are punched in mapped blocks and filled from their front") {
  Bench c(16 * MiB, /*mapped=*/false);  // a reservation: one hole
  d::Block* h = c.seg.head;
  d::Block* rest = c.blank();
  Chain::fill_hole(h, 6 * MiB, rest);  // [h 6 mapped][rest 10 hole]
  CHECK(h->mapped);
  CHECK_FALSE(rest->mapped);
  CHECK(rest->segment == &c.seg);
  CHECK(c.layout() == L{{0, 6 * MiB, true}, {6 * MiB, 10 * MiB, false}});
  CHECK(c.broken().empty());

  // A hole in the middle of h: mapped pieces stay on both sides.
  d::Block* before = c.blank();
  d::Block* after = c.blank();
  Chain::punch_hole(h, GiB + 2 * MiB, 2 * MiB, before, after);
  CHECK(c.layout() ==
        L{{0, 2 * MiB, true}, {2 * MiB, 2 * MiB, false}, {4 * MiB, 2 * MiB, true}, {6 * MiB, 10 * MiB, false}});
  CHECK(c.seg.head == before);
  CHECK(before->mapped);
  CHECK(after->mapped);
  CHECK(c.broken().empty());

  // At the front of a block (no piece before), then the whole of one (no piece at all).
  d::Block* after2 = c.blank();
  Chain::punch_hole(before, GiB, 1 * MiB, nullptr, after2);
  CHECK(c.layout() == L{{0, 1 * MiB, false},
                        {1 * MiB, 1 * MiB, true},
                        {2 * MiB, 2 * MiB, false},
                        {4 * MiB, 2 * MiB, true},
                        {6 * MiB, 10 * MiB, false}});
  Chain::punch_hole(after, GiB + 4 * MiB, 2 * MiB, nullptr, nullptr);
  CHECK_FALSE(after->mapped);
  // Holes merge with holes (the allocator merges only like with like): [1 hole][1][12 hole].
  CHECK(Chain::merge(after, rest) == 10 * MiB);
  CHECK(Chain::merge(after, h) == 2 * MiB);
  CHECK(c.layout() == L{{0, 1 * MiB, false}, {1 * MiB, 1 * MiB, true}, {2 * MiB, 14 * MiB, false}});
  CHECK(c.broken().empty());

  // Filling a whole hole needs no record for a rest.
  Chain::fill_hole(c.seg.head, 1 * MiB, nullptr);
  CHECK(c.layout() == L{{0, 1 * MiB, true}, {1 * MiB, 1 * MiB, true}, {2 * MiB, 14 * MiB, false}});
  CHECK(c.broken().empty());
}

TEST_CASE("segment chain: check_links names what is broken") {
  Bench c(8 * MiB);
  d::Block* a = c.seg.head;
  d::Block* b = c.blank();
  d::Block* z = c.blank();
  Chain::split_back(a, b, 2 * MiB);
  Chain::split_back(b, z, 2 * MiB);  // [a 2][b 2][z 4]
  REQUIRE(c.broken().empty());

  SECTION("a prev link that points elsewhere") {
    d::BlockTestAccess::prev(*b) = z;
    CHECK(c.broken() == "block prev link");
  }
  SECTION("a gap between neighbours") {
    b->size -= 512;
    CHECK(c.broken() == "blocks do not tile their segment (gap or overlap)");
  }
  SECTION("an empty block") {
    const std::size_t moved = b->size;
    b->size = 0;
    z->addr -= moved;
    z->size += moved;
    CHECK(c.broken() == "blocks do not tile their segment (gap or overlap)");
  }
  SECTION("a block of another segment") {
    d::Segment other;
    z->segment = &other;
    CHECK(c.broken() == "block points at another segment");
  }
  SECTION("a chain shorter than its segment") {
    z->size -= 1 * MiB;
    CHECK(c.broken() == "blocks do not cover their segment");
  }
  SECTION("a chain longer than its segment") {
    c.span = 6 * MiB;
    CHECK(c.broken() == "blocks run past their segment's end");
  }
  SECTION("a head that is not the first block") {
    c.seg.head = b;
    CHECK(c.broken() == "segment head");
  }
  SECTION("no head") {
    c.seg.head = nullptr;
    CHECK(c.broken() == "segment head");
  }
}

#if GPUMEMPROF_CHECK_LINKS
// Runs f() in a child process; true when the child stopped with the link checks' message (and did
// not exit normally: abort(), however a sanitizer's runtime reports it).
template <class F>
bool aborts(F&& f) {
  int err[2];
  REQUIRE(::pipe(err) == 0);
  std::cout.flush();  // the child must not write the parent's buffered output again
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[0]);
    std::forward<F>(f)();
    ::_exit(0);
  }
  ::close(err[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  ::close(err[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child status " << status << ", stderr: " << said);
  const bool exited_cleanly = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return !exited_cleanly && said.find("gpumemprof: broken block links") != std::string::npos;
}

TEST_CASE("segment chain: operations stop on broken links before changing them") {
  Bench c(8 * MiB);
  d::Block* a = c.seg.head;
  d::Block* b = c.blank();
  Chain::split_back(a, b, 4 * MiB);  // [a 4][b 4]
  d::Block* piece = c.blank();

  CHECK_FALSE(aborts([&] { Chain::split_front(b, piece, 1 * MiB); }));  // the control: a sound chain
  CHECK(aborts([&] {
    d::BlockTestAccess::next(*a) = nullptr;  // b's predecessor lost it
    Chain::split_front(b, piece, 1 * MiB);
  }));
  CHECK(aborts([&] {
    c.seg.head = b;  // a thinks it heads the segment, the segment disagrees
    Chain::merge(b, a);
  }));
  CHECK(aborts([&] { Chain::split_back(a, piece, 4 * MiB); }));                    // nothing left for the piece
  CHECK(aborts([&] { Chain::split_front(a, b, 1 * MiB); }));                       // a record still in the chain
  CHECK(aborts([&] { Chain::fill_hole(a, 1 * MiB, piece); }));                     // a is mapped: not a hole
  CHECK(aborts([&] { Chain::punch_hole(a, GiB + MiB, MiB, nullptr, nullptr); }));  // pieces without records
  CHECK(aborts([&] {
    d::Block* far = c.blank();
    Chain::split_back(b, far, 2 * MiB);  // [a 4][b 2][far 2]
    Chain::merge(a, far);                // not neighbours
  }));
  CHECK(aborts([&] { (void)Chain::finish(c.seg); }));  // two blocks: not a whole segment
  CHECK(c.broken().empty());                           // the children's changes stayed in the children
}
#endif

}  // namespace segment_chain_tests
