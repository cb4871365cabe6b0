// Layer 2: the allocator's bookkeeping records and where they live.
//
// Data structures and invariants (checked by CachingAllocator::validate()):
// - A Segment is one device allocation. Its Blocks tile it exactly, linked in address order
//   by prev/next; Segment::head is the lowest. Segments never merge.
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

// Field order matters: the first cache line holds what tree operations and merges touch
// (links, flags, address, size, neighbours); the second what only allocation and free read.
struct alignas(64) Block {
  // FreeTree links (meaningful only while the block is free).
  Block* tree_left = nullptr;
  Block* tree_right = nullptr;
  Block* tree_parent = nullptr;
  bool tree_red = false;

  bool allocated = false;
  bool small_pool = false;
  bool mapped = true;             // false: an unmapped tail of an expandable segment
  std::uint32_t event_count = 0;  // outstanding cross-stream events (pending free while > 0)

  std::uintptr_t addr = 0;
  std::size_t size = 0;   // bytes, a multiple of 512
  Block* prev = nullptr;  // address neighbours in the segment
  Block* next = nullptr;

  std::size_t requested = 0;  // bytes the client asked for (0 when not active)
  Stream stream;
  Segment* segment = nullptr;
  std::uint64_t gc_base = 0;                         // pool's free-block lookups count when the block became free
  std::uint64_t context = 0;                         // history handle of the allocation (0 = none)
  std::unique_ptr<std::vector<Stream>> stream_uses;  // other streams recorded via record_stream

  [[nodiscard]] bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
  [[nodiscard]] bool is_free() const noexcept { return !allocated && event_count == 0; }
};

struct Segment {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes reserved (for expandable segments: bytes mapped)
  Stream stream;
  bool small_pool = false;
  bool expandable = false;
  Block* head = nullptr;
  std::uint64_t context = 0;     // history handle of the allocation that created it
  Segment* list_prev = nullptr;  // all segments of the allocator, in creation order
  Segment* list_next = nullptr;
  Reservation reservation;  // expandable segments: the reserved address range
};

/// A free list over slabs of T: get() and put() never touch the heap once warmed up.
template <class T>
class ObjectPool {
 public:
  ObjectPool() = default;
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  [[nodiscard]] T* get() {
    if (free_.empty()) grow();
    T* p = free_.back();
    free_.pop_back();
    ++live_;
    return p;
  }
  void put(T* p) noexcept {
    *p = T{};            // drop links and owned state so a stale pointer sees a blank record
    free_.push_back(p);  // capacity reserved in grow(): never reallocates here
    --live_;
  }
  [[nodiscard]] std::size_t live() const noexcept { return live_; }

 private:
  static constexpr std::size_t slab_size = 256;
  void grow() {
    slabs_.push_back(std::make_unique<T[]>(slab_size));
    free_.reserve(slabs_.size() * slab_size);
    for (std::size_t i = slab_size; i-- > 0;) free_.push_back(&slabs_.back()[i]);
  }
  std::vector<std::unique_ptr<T[]>> slabs_;
  std::vector<T*> free_;
  std::size_t live_ = 0;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
