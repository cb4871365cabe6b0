// Layer 2: the allocator's bookkeeping records and where they live.
//
// Data structures and invariants (checked by CachingAllocator::validate()):
// - A Segment is one device allocation. Its Blocks tile it exactly, linked in address order
//   by prev/next; Segment::head is the lowest. Segments never merge. The links are private:
//   only SegmentChain (segment_chain.hpp) changes them; everyone else reads prev()/next().
//   The free-tree links are private too: only FreeTree (free_tree.hpp) reads or writes them.
// - A Block is in exactly one of three states:
//     allocated      -- handed to the client; found by address in the PointerMap;
//     pending free   -- freed by the client but used on other streams (event_count > 0);
//                       waits in the per-stream event queues, in no index;
//     free           -- in the FreeTree of its (pool, stream), keyed by (size, address).
// - Two free blocks are never neighbours: freeing merges a block with free neighbours.
// - Blocks and Segments come from ObjectPools, so steady-state requests allocate no heap memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

struct Segment;
template <class Node>
class FreeTree;

// Field order matters: the first cache line holds what tree operations and merges touch
// (links, flags, address, size, neighbours); the second what only allocation and free read.
struct alignas(64) Block {
 private:
  // FreeTree links (meaningful only while the block is free): FreeTree (free_tree.hpp) is their
  // only reader and writer.
  template <class Node>
  friend class FreeTree;
  Block* tree_left = nullptr;
  Block* tree_right = nullptr;
  Block* tree_parent = nullptr;
  bool tree_red = false;

 public:
  bool allocated = false;
  bool small_pool = false;
  bool mapped = true;             // false: an unmapped tail of an expandable segment
  std::uint32_t event_count = 0;  // outstanding cross-stream events (pending free while > 0)

  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes, a multiple of 512

 private:
  friend class SegmentChain;      // the only writer of the links
  friend struct BlockTestAccess;  // tests/allocator/test_segment_chain.cpp breaks links on purpose
  Block* prev_ = nullptr;         // address neighbours in the segment
  Block* next_ = nullptr;

 public:
  std::size_t requested = 0;  // bytes the client asked for (0 when not active)
  Stream stream;
  Segment* segment = nullptr;
  std::uint64_t gc_base = 0;                         // pool's free-block lookups count when the block became free
  std::uint64_t context = 0;                         // history handle of the allocation (0 = none)
  std::uint32_t category = 0;                        // memory category id of the allocation (0 = none)
  std::uint32_t pool = 0;                            // private pool index (0: the default pool), as its segment's
  std::unique_ptr<std::vector<Stream>> stream_uses;  // other streams recorded via record_stream
  Block* free_next = nullptr;                        // ObjectPool's free list (records not in use)

  /// The block before / after this one in its segment (address order); null at either end.
  [[nodiscard]] Block* prev() const noexcept { return prev_; }
  [[nodiscard]] Block* next() const noexcept { return next_; }
  [[nodiscard]] bool is_split() const noexcept { return prev_ != nullptr || next_ != nullptr; }
  [[nodiscard]] bool is_free() const noexcept { return !allocated && event_count == 0; }
};

struct Segment {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes reserved (for expandable segments: bytes mapped)
  Stream stream;
  bool small_pool = false;
  bool expandable = false;
  std::uint32_t pool = 0;             // private pool index (0: the default pool)
  bool no_split = false;              // its pool's blocks are never split (MemPoolOptions::no_split)
  std::uint64_t pool_id[2] = {0, 0};  // its pool's MempoolId (snapshots' segment_pool_id)
  Block* head = nullptr;
  std::uint64_t context = 0;     // history handle of the allocation that created it
  Segment* list_prev = nullptr;  // all segments of the allocator, in creation order
  Segment* list_next = nullptr;
  Reservation reservation;       // expandable segments: the reserved address range
  Segment* free_next = nullptr;  // ObjectPool's free list (records not in use)
};

/// A free list over slabs of T (linked through T::free_next): get() and put() never touch the
/// heap once warmed up. A record may be put into another pool than the one it came from (the
/// allocator's per-stream shards and its slow paths each keep one); slabs stay with the pool that
/// made them, so every pool of an owner must live as long as any record is in use.
template <class T>
class ObjectPool {
 public:
  ObjectPool() = default;
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  [[nodiscard]] T* get() {
    if (head_ == nullptr) grow();
    T* p = head_;
    head_ = p->free_next;
    p->free_next = nullptr;
    --free_;
    return p;
  }
  void put(T* p) noexcept {
    *p = T{};  // drop links and owned state so a stale pointer sees a blank record
    p->free_next = head_;
    head_ = p;
    ++free_;
  }
  /// Makes sure the next `n` get() calls cannot throw. May throw std::bad_alloc.
  void reserve(std::size_t n) {
    while (free_ < n) grow();
  }

 private:
  static constexpr std::size_t slab_size = 256;
  void grow() {
    slabs_.reserve(slabs_.size() + 1);  // first: a failure leaves the pool as it was
    slabs_.push_back(std::make_unique<T[]>(slab_size));
    for (std::size_t i = slab_size; i-- > 0;) {
      slabs_.back()[i].free_next = head_;
      head_ = &slabs_.back()[i];
    }
    free_ += slab_size;
  }
  std::vector<std::unique_ptr<T[]>> slabs_;
  T* head_ = nullptr;
  std::size_t free_ = 0;  // records on the free list
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
