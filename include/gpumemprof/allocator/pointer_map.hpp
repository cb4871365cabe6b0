// Layer 2: address -> allocated block, an open-addressing hash table with linear probing and
// backward-shift deletion (no tombstones, so lookups stay short under churn). O(1) find, insert
// and erase; it grows only when more blocks are live than ever before, and holds no memory until
// the first insert (an allocator keeps many: one per pointer-map bucket).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

template <class Value>
class PointerMap {
 public:
  PointerMap() = default;

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  [[nodiscard]] Value* find(std::uintptr_t key) const noexcept {
    if (count_ == 0) return nullptr;  // also: no slots yet
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }

  /// Makes sure the next insert cannot throw. May throw std::bad_alloc (the map unchanged).
  void reserve_one() {
    if ((count_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? kFirstCapacity : slots_.size() * 2);
  }
  /// Inserts a key that is not present (key != 0). Throws only where reserve_one() was not called.
  void insert(std::uintptr_t key, Value* value) {
    reserve_one();
    place(key, value);
    ++count_;
  }

  /// Removes `key`; returns its value, or nullptr when absent.
  Value* erase(std::uintptr_t key) noexcept {
    if (count_ == 0) return nullptr;
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;
      if (slots_[i].key == 0) return nullptr;
    }
    Value* v = slots_[i].value;
    // Shift later members of the probe run back into the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --count_;
    return v;
  }

  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.key != 0) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    Value* value = nullptr;
  };
  static constexpr std::size_t kFirstCapacity = 16;

  // Fibonacci hashing of the 512-byte-granular address: the top bits spread consecutive blocks.
  [[nodiscard]] std::size_t home(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(std::uintptr_t key, Value* value) noexcept {
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
  }
  void rehash(std::size_t capacity) {
    std::vector<Slot> old(capacity);  // first: a failure leaves the map as it was
    old.swap(slots_);
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    for (const Slot& s : old) {
      if (s.key != 0) place(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t count_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
