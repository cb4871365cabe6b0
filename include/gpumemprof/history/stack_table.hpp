// Layer 3: interned stacks. The recorder turns each captured stack (raw return addresses) into
// a small integer id -- equal stacks, one id -- so trace entries and blocks carry 4 bytes
// instead of a stack. Interning runs under the allocator's lock: one hash, one probe, no heap
// allocation for a stack seen before. FrameResolver (frame_resolver.hpp) turns ids into the
// snapshot's shared Frames lists, symbolizing lazily.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class StackTable {
 public:
  /// Id 0 is "no stack".
  static constexpr std::uint32_t none = 0;

  /// The id of the stack `frames[0..n)` (innermost first); new stacks get the next id.
  std::uint32_t intern(const std::uintptr_t* frames, std::size_t n) {
    if (n == 0) return none;
    const std::uint64_t h = hash(frames, n);
    if (slots_.empty()) rehash(1024);
    std::size_t i = static_cast<std::size_t>(h) & (slots_.size() - 1);
    for (; slots_[i] != none; i = (i + 1) & (slots_.size() - 1)) {
      const std::uint32_t id = slots_[i];
      if (hashes_[id - 1] == h && equal(id, frames, n)) return id;
    }
    hashes_.push_back(h);
    frames_.insert(frames_.end(), frames, frames + n);
    offsets_.push_back(static_cast<std::uint32_t>(frames_.size()));
    const auto id = static_cast<std::uint32_t>(hashes_.size());
    slots_[i] = id;
    if (hashes_.size() * 2 > slots_.size()) rehash(slots_.size() * 2);
    return id;
  }

  /// The frames of stack `id` (1 <= id <= size()).
  [[nodiscard]] std::span<const std::uintptr_t> frames(std::uint32_t id) const noexcept {
    return {frames_.data() + offsets_[id - 1], frames_.data() + offsets_[id]};
  }
  [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(hashes_.size()); }

  void clear() noexcept {
    frames_.clear();
    offsets_.assign(1, 0);
    hashes_.clear();
    slots_.clear();
  }

 private:
  static std::uint64_t hash(const std::uintptr_t* f, std::size_t n) noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (std::size_t i = 0; i < n; ++i) {
      h ^= f[i];
      h *= 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    return h;
  }
  [[nodiscard]] bool equal(std::uint32_t id, const std::uintptr_t* f, std::size_t n) const noexcept {
    const auto s = frames(id);
    if (s.size() != n) return false;
    for (std::size_t i = 0; i < n; ++i) {
      if (s[i] != f[i]) return false;
    }
    return true;
  }
  void rehash(std::size_t capacity) {
    slots_.assign(capacity, none);
    for (std::uint32_t id = 1; id <= size(); ++id) {
      std::size_t i = static_cast<std::size_t>(hashes_[id - 1]) & (capacity - 1);
      while (slots_[i] != none) i = (i + 1) & (capacity - 1);
      slots_[i] = id;
    }
  }

  std::vector<std::uintptr_t> frames_;     // all stacks, concatenated
  std::vector<std::uint32_t> offsets_{0};  // stack id's frames: [offsets_[id-1], offsets_[id])
  std::vector<std::uint64_t> hashes_;      // by id - 1
  std::vector<std::uint32_t> slots_;       // open addressing over ids; size a power of two
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
