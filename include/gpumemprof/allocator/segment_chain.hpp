// Layer 2: the one place that edits a segment's chain of blocks -- the prev/next links of
// Block, Segment::head, and the addresses and sizes the links order.
//
// A segment's blocks tile it in address order: head first (head->prev_ == nullptr, head->addr ==
// segment addr), each block's next starts where it ends, next->prev_ points back, the last one
// ends at the segment's end (its reservation's end for an expandable segment). Every operation
// below keeps that, and only these operations change links; the allocator decides *what* to
// split, merge, punch or fill (policy, trees, stats, records, the device) and calls them.
//
// Each operation checks the links it is about to change (GPUMEMPROF_CHECK_LINKS, on in builds
// without NDEBUG) and stops the program with a message if they are broken: the allocator's state
// is corrupt then, and going on would lose or hand out memory twice. check_links() checks a
// whole chain and says what is broken; CachingAllocator::validate() calls it.
// None of them allocates or throws: records come from the caller, who has taken them first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

class SegmentChain {
 public:
  /// Makes `b` (a blank record) the only block of `s`, covering `span` bytes from s.addr.
  static void start(Segment& s, Block* b, std::size_t span, bool mapped) noexcept {
    if constexpr (kChecked) expect(s.head == nullptr && is_blank(b), "start: the segment or block is in use", b);
    b->addr = s.addr;
    b->size = span;
    b->stream = s.stream;
    b->segment = &s;
    b->small_pool = s.small_pool;
    b->pool = s.pool;
    b->mapped = mapped;
    s.head = b;
  }

  /// The only block of `s`, detached from it (the segment goes back whole).
  [[nodiscard]] static Block* finish(Segment& s) noexcept {
    Block* b = s.head;
    if constexpr (kChecked) {
      expect(b != nullptr && b->prev_ == nullptr && b->next_ == nullptr && b->segment == &s,
             "finish: a segment given back holds more than one block", b);
    }
    s.head = nullptr;
    return b;
  }

  /// Splits the first `bytes` of `b` off into `piece` (a blank record), linked before `b`;
  /// `b` keeps the rest. `piece` inherits b's segment, stream, pool and mapping.
  static void split_front(Block* b, Block* piece, std::size_t bytes) noexcept {
    if constexpr (kChecked) check_split(b, piece, bytes, "split_front");
    copy_place(piece, b);
    piece->addr = b->addr;
    piece->size = bytes;
    piece->prev_ = b->prev_;
    (b->prev_ != nullptr ? b->prev_->next_ : b->segment->head) = piece;
    piece->next_ = b;
    b->prev_ = piece;
    b->addr += bytes;
    b->size -= bytes;
  }

  /// Splits `b` after its first `keep` bytes: `piece` (a blank record) takes the rest, linked
  /// after `b`. `piece` inherits b's segment, stream, pool and mapping.
  static void split_back(Block* b, Block* piece, std::size_t keep) noexcept {
    if constexpr (kChecked) check_split(b, piece, keep, "split_back");
    copy_place(piece, b);
    piece->addr = b->addr + keep;
    piece->size = b->size - keep;
    piece->prev_ = b;
    piece->next_ = b->next_;
    if (b->next_ != nullptr) b->next_->prev_ = piece;
    b->next_ = piece;
    b->size = keep;
  }

  /// `dst` grows over its neighbour `src`, which leaves the chain (its record is the caller's
  /// to give back). Returns src's size.
  static std::size_t merge(Block* dst, Block* src) noexcept {
    if constexpr (kChecked) check_merge(dst, src);
    const std::size_t absorbed = src->size;
    if (dst->prev_ == src) {  // [src dst]
      dst->addr = src->addr;
      dst->prev_ = src->prev_;
      if (dst->prev_ != nullptr) {
        dst->prev_->next_ = dst;
      } else {
        dst->segment->head = dst;
      }
    } else {  // [dst src]
      dst->next_ = src->next_;
      if (dst->next_ != nullptr) dst->next_->prev_ = dst;
    }
    dst->size += absorbed;
    return absorbed;
  }

  /// Punches a hole at [addr, addr + bytes) of the mapped block `b` (pages about to be
  /// unmapped): `b` becomes the hole; the mapped bytes before and after it go to `before` and
  /// `after` (blank records, nullptr exactly when there are none). Holes merge with holes only
  /// (merge(), by the caller).
  static void punch_hole(Block* b, std::uintptr_t addr, std::size_t bytes, Block* before, Block* after) noexcept {
    if constexpr (kChecked) {
      expect(b->mapped && addr >= b->addr && bytes != 0 && addr + bytes <= b->addr + b->size,
             "punch_hole: the hole is not inside one mapped block", b);
      expect((before != nullptr) == (addr > b->addr) && (after != nullptr) == (addr + bytes < b->addr + b->size),
             "punch_hole: records for the pieces around the hole do not match them", b);
    }
    if (before != nullptr) split_front(b, before, addr - b->addr);
    if (after != nullptr) split_back(b, after, bytes);
    b->mapped = false;
  }

  /// Fills the first `bytes` of the hole `hole` (pages just mapped): it becomes a mapped block
  /// of `bytes`; the rest of the hole, if any, goes to `rest` (a blank record, nullptr exactly
  /// when the whole hole is filled), still a hole.
  static void fill_hole(Block* hole, std::size_t bytes, Block* rest) noexcept {
    if constexpr (kChecked) {
      expect(!hole->mapped && bytes != 0 && bytes <= hole->size && (rest != nullptr) == (bytes < hole->size),
             "fill_hole: not a hole, or the rest's record does not match it", hole);
    }
    if (rest != nullptr) split_back(hole, rest, bytes);
    hole->mapped = true;
  }

  /// What is wrong with the chain of `s` covering `span` bytes (nullptr: nothing): the head,
  /// each prev link, each block's segment, the tiling (no gap or overlap, no empty block), the
  /// end. Reads only; walks the chain once.
  [[nodiscard]] static const char* check_links(const Segment& s, std::size_t span) noexcept {
    const Block* b = s.head;
    if (b == nullptr || b->prev_ != nullptr || b->addr != s.addr) return "segment head";
    std::uintptr_t at = s.addr;
    for (const Block* before = nullptr; b != nullptr; before = b, b = b->next_) {
      if (b->prev_ != before) return "block prev link";
      if (b->segment != &s) return "block points at another segment";
      if (b->addr != at || b->size == 0) return "blocks do not tile their segment (gap or overlap)";
      at += b->size;
      if (at > s.addr + span) return "blocks run past their segment's end";
    }
    if (at != s.addr + span) return "blocks do not cover their segment";
    return nullptr;
  }

 private:
#if GPUMEMPROF_CHECK_LINKS
  static constexpr bool kChecked = true;
#else
  static constexpr bool kChecked = false;
#endif

  static void copy_place(Block* piece, const Block* b) noexcept {
    piece->stream = b->stream;
    piece->segment = b->segment;
    piece->small_pool = b->small_pool;
    piece->pool = b->pool;
    piece->mapped = b->mapped;
  }
  static bool is_blank(const Block* p) noexcept {
    return p != nullptr && p->prev_ == nullptr && p->next_ == nullptr && !p->allocated;
  }
  // b's own links agree with its neighbours' and its segment's head.
  static bool linked(const Block* b) noexcept {
    return b->segment != nullptr && (b->prev_ != nullptr ? b->prev_->next_ == b : b->segment->head == b) &&
           (b->next_ == nullptr || b->next_->prev_ == b);
  }
  static void check_split(const Block* b, const Block* piece, std::size_t bytes, const char* op) noexcept {
    expect(linked(b), op, b);
    expect(is_blank(piece) && piece != b, op, piece);
    expect(bytes != 0 && bytes < b->size, op, b);
  }
  static void check_merge(const Block* dst, const Block* src) noexcept {
    expect(src != nullptr && (dst->prev_ == src || dst->next_ == src) && src->segment == dst->segment,
           "merge: not neighbours", dst);
    expect(linked(dst) && linked(src), "merge", src);
    expect(dst->prev_ == src ? src->addr + src->size == dst->addr : dst->addr + dst->size == src->addr,
           "merge: neighbours are not adjacent", dst);
  }
  static void expect(bool ok, const char* what, const Block* at) noexcept {
    if (GPUMEMPROF_LIKELY(ok)) return;
    std::fprintf(stderr, "gpumemprof: broken block links in %s at block %p: the allocator's state is corrupt\n", what,
                 static_cast<const void*>(at));
    std::abort();
  }
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
