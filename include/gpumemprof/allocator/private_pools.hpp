// Layer 2: private memory pools -- their ids, options and the allocator's table of them.
//
// A private pool (PyTorch's PrivatePool) is a set of segments that only allocations routed to it
// use: a CUDA graph's memory (its addresses must stay valid for every replay), or a user's
// MemPool. Ids are PyTorch's MempoolId_t pairs: (N, 0) for graph pools (graph_pool_handle),
// (0, N) for user pools; (0, 0) is the default pool. A pool lives while it has users (use count)
// or segments; routes (begin/end_allocate_to_pool) say which allocations go to it.
// The table is plain data: the allocator guards it with its device mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/mempool_id.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

class PrivatePools {
 public:
  struct Entry {
    MempoolId id;
    int use_count = 0;
    std::size_t segments = 0;
    MemPoolOptions options;
    bool live = false;
  };
  struct Route {
    MempoolId id;
    std::uint32_t index = 0;
    std::function<bool(Stream)> filter;
  };

  PrivatePools() { entries_.emplace_back(); }  // index 0: the default pool

  /// The index of pool `id`, or 0 when there is no such pool.
  [[nodiscard]] std::uint32_t find(MempoolId id) const noexcept {
    if (id.is_default()) return 0;
    for (std::uint32_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].live && entries_[i].id == id) return i;
    }
    return 0;
  }
  /// The index of pool `id`, created (use count 0) when new. May throw std::bad_alloc.
  std::uint32_t find_or_create(MempoolId id, const MemPoolOptions& options) {
    if (const std::uint32_t i = find(id); i != 0) return i;
    std::uint32_t slot = 1;
    while (slot < entries_.size() && entries_[slot].live) ++slot;
    if (slot == entries_.size()) entries_.emplace_back();
    entries_[slot] = Entry{id, 0, 0, options, true};
    return slot;
  }
  [[nodiscard]] Entry& at(std::uint32_t index) noexcept { return entries_[index]; }
  [[nodiscard]] const Entry& at(std::uint32_t index) const noexcept { return entries_[index]; }
  [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(entries_.size()); }
  /// A pool with no users and no segments is gone (its index may be taken again).
  void forget_if_unused(std::uint32_t index) noexcept {
    Entry& e = entries_[index];
    if (index != 0 && e.use_count <= 0 && e.segments == 0) e = Entry{};
  }
  /// Whether the pool at `index` has users (its memory stays with it).
  [[nodiscard]] bool held(std::uint32_t index) const noexcept { return index != 0 && entries_[index].use_count > 0; }

  [[nodiscard]] bool routing() const noexcept { return !routes_.empty(); }
  [[nodiscard]] std::size_t routes_to(std::uint32_t index) const noexcept {
    std::size_t n = 0;
    for (const Route& r : routes_) n += r.index == index ? 1 : 0;
    return n;
  }
  /// The pool of an allocation on `stream` now: the first route whose filter takes it, else 0.
  [[nodiscard]] std::uint32_t route_for(Stream stream) const {
    for (const Route& r : routes_) {
      if (!r.filter || r.filter(stream)) return r.index;
    }
    return 0;
  }
  void add_route(MempoolId id, std::uint32_t index, std::function<bool(Stream)> filter) {
    routes_.push_back(Route{id, index, std::move(filter)});
  }
  /// Removes the latest route to `id`; false when there is none.
  bool remove_route(MempoolId id) noexcept {
    for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
      if (it->id == id) {
        routes_.erase(std::next(it).base());
        return true;
      }
    }
    return false;
  }
  // Streams recorded (record_stream) on a block while a route is active, by block address: c10's
  // block_to_cudagraph_stream_uses. Work a capture put on them is part of the graph, which the
  // capture's end orders before any later work, so a free deferred during capture does not wait
  // for them.
  /// Room for one more note_capture_use (the part that may throw, std::bad_alloc).
  void reserve_capture_use() { capture_uses_.reserve(capture_uses_.size() + 1); }
  /// Notes a capture-time use; after reserve_capture_use() it does not throw.
  void note_capture_use(std::uintptr_t addr, Stream stream) {
    for (const auto& [a, s] : capture_uses_) {
      if (a == addr && s == stream) return;
    }
    capture_uses_.emplace_back(addr, stream);
  }
  /// Removes block `addr`'s capture-time streams from `uses` and forgets them.
  void drop_capture_uses(std::uintptr_t addr, std::vector<Stream>& uses) {
    std::erase_if(capture_uses_, [&](const std::pair<std::uintptr_t, Stream>& e) {
      if (e.first != addr) return false;
      std::erase(uses, e.second);
      return true;
    });
  }
  /// Forgets block `addr`'s capture-time streams (it is freed with events on every use).
  void forget_capture_uses(std::uintptr_t addr) {
    std::erase_if(capture_uses_, [addr](const std::pair<std::uintptr_t, Stream>& e) { return e.first == addr; });
  }
  /// Forgets every capture-time use of `stream` (release_stream: it no longer names work).
  void forget_capture_stream(Stream stream) {
    std::erase_if(capture_uses_, [stream](const std::pair<std::uintptr_t, Stream>& e) { return e.second == stream; });
  }

  /// Pools that allocations of the default pool may borrow from before an OOM.
  template <class F>
  void for_each_use_on_oom(F&& f) const {
    for (std::uint32_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].live && entries_[i].options.use_on_oom) f(i);
    }
  }

 private:
  std::vector<Entry> entries_;
  std::vector<Route> routes_;
  std::vector<std::pair<std::uintptr_t, Stream>> capture_uses_;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
