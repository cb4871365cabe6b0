// Layer 2: the free blocks of one (pool, stream), ordered by (size, address) like PyTorch's
// BlockComparatorSize, built for O(1) best fit.
//
// Sizes up to `exact_limit` get one bin per exact size (multiples of 512 B; bins are allocated in
// chunks as sizes first appear); a three-level bitmap finds the first non-empty bin at or above a
// request in a few word operations, and a bin's
// blocks sit in a small tree by address (all sizes in a bin are equal), so its lowest address is
// the best fit. Larger blocks -- few, whole big segments -- live in one FreeTree. The order seen
// through lower_bound/first/last/next/prev is exactly (size, address), so the default policy hands
// out the same blocks PyTorch does.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "gpumemprof/allocator/free_tree.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// A set of bits with O(1) "next set bit at or after i" and "previous set bit at or before i".
class HierarchicalBitmap {
 public:
  explicit HierarchicalBitmap(std::size_t bits)
      : l0_((bits + 63) / 64), l1_((l0_.size() + 63) / 64), l2_((l1_.size() + 63) / 64) {
    if (l2_.size() > 64) throw std::invalid_argument("HierarchicalBitmap: too many bits");
  }
  [[nodiscard]] bool test(std::size_t i) const noexcept { return (l0_[i >> 6] & bit(i)) != 0; }
  void set(std::size_t i) noexcept {
    l0_[i >> 6] |= bit(i);
    l1_[i >> 12] |= bit(i >> 6);
    l2_[i >> 18] |= bit(i >> 12);
    top_ |= bit(i >> 18);
  }
  void clear(std::size_t i) noexcept {
    if ((l0_[i >> 6] &= ~bit(i)) != 0) return;
    if ((l1_[i >> 12] &= ~bit(i >> 6)) != 0) return;
    if ((l2_[i >> 18] &= ~bit(i >> 12)) != 0) return;
    top_ &= ~bit(i >> 18);
  }
  /// The first set bit >= i, or npos.
  [[nodiscard]] std::size_t next(std::size_t i) const noexcept {
    if ((i >> 6) >= l0_.size()) return npos;
    if (const std::uint64_t w = l0_[i >> 6] & (~std::uint64_t{0} << (i & 63)); w != 0) {
      return (i & ~std::size_t{63}) + static_cast<std::size_t>(std::countr_zero(w));
    }
    std::size_t j = (i >> 6) + 1;  // next L0 word
    if ((j & 63) != 0) {
      if (const std::uint64_t w = l1_[j >> 6] & (~std::uint64_t{0} << (j & 63)); w != 0) {
        return first_in_l0((j & ~std::size_t{63}) + static_cast<std::size_t>(std::countr_zero(w)));
      }
      j = (j | 63) + 1;
    }
    std::size_t k = j >> 6;  // next L1 word
    if (k >= l1_.size()) return npos;
    if ((k & 63) != 0) {
      if (const std::uint64_t w = l2_[k >> 6] & (~std::uint64_t{0} << (k & 63)); w != 0) {
        return first_in_l1((k & ~std::size_t{63}) + static_cast<std::size_t>(std::countr_zero(w)));
      }
      k = (k | 63) + 1;
    }
    const std::size_t m = k >> 6;  // next L2 word
    if (m >= l2_.size()) return npos;
    const std::uint64_t w = top_ & (~std::uint64_t{0} << m);
    if (w == 0) return npos;
    const auto l2 = static_cast<std::size_t>(std::countr_zero(w));
    return first_in_l1((l2 << 6) + static_cast<std::size_t>(std::countr_zero(l2_[l2])));
  }
  /// The last set bit <= i, or npos.
  [[nodiscard]] std::size_t prev(std::size_t i) const noexcept {
    if ((i >> 6) >= l0_.size()) i = l0_.size() * 64 - 1;
    for (;;) {  // at most a few words per level; slow paths only
      const std::uint64_t w = l0_[i >> 6] & (~std::uint64_t{0} >> (63 - (i & 63)));
      if (w != 0) return (i & ~std::size_t{63}) + 63 - static_cast<std::size_t>(std::countl_zero(w));
      std::size_t word = i >> 6;
      if (word == 0) return npos;
      // Find the previous non-empty L0 word through L1.
      std::size_t j = word - 1;
      for (;;) {
        const std::uint64_t v = l1_[j >> 6] & (~std::uint64_t{0} >> (63 - (j & 63)));
        if (v != 0) {
          j = (j & ~std::size_t{63}) + 63 - static_cast<std::size_t>(std::countl_zero(v));
          break;
        }
        if ((j >> 6) == 0) return npos;
        j = (j & ~std::size_t{63}) - 1;
      }
      i = j * 64 + 63;
    }
  }
  static constexpr std::size_t npos = ~std::size_t{0};

 private:
  static constexpr std::uint64_t bit(std::size_t i) noexcept { return std::uint64_t{1} << (i & 63); }
  [[nodiscard]] std::size_t first_in_l0(std::size_t word) const noexcept {
    return (word << 6) + static_cast<std::size_t>(std::countr_zero(l0_[word]));
  }
  [[nodiscard]] std::size_t first_in_l1(std::size_t word) const noexcept {
    return first_in_l0((word << 6) + static_cast<std::size_t>(std::countr_zero(l1_[word])));
  }
  std::vector<std::uint64_t> l0_, l1_, l2_;
  std::uint64_t top_ = 0;
};

/// Node: as for FreeTree (tree links, size, addr); sizes are positive multiples of 512.
template <class Node>
class FreeIndex {
 public:
  static constexpr std::size_t granule = 512;

  /// Exact bins for sizes <= exact_limit bytes (a multiple of 512).
  explicit FreeIndex(std::size_t exact_limit)
      : nbins_(exact_limit / granule), chunks_((nbins_ + chunk_bins - 1) / chunk_bins), bitmap_(nbins_) {}

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  /// Makes room for a block of `size` bytes, so that inserting one cannot throw: call before
  /// changing anything that an insert would have to complete. May throw std::bad_alloc.
  void reserve(std::size_t size) {
    if (const std::size_t b = bin_of(size); b < nbins_) {
      auto& chunk = chunks_[b / chunk_bins];
      if (!chunk) chunk = std::make_unique<Bin[]>(chunk_bins);  // first block of these sizes
    }
  }
  /// Throws std::bad_alloc only where reserve(n->size) was not called.
  void insert(Node* n) {
    if (const std::size_t b = bin_of(n->size); b < nbins_) {
      reserve(n->size);
      Bin& bin = this->bin(b);
      // Most bins hold one block or none. The bitmap (one line per 512 bins) says which, so an
      // empty bin is only written: its line (one per 4 bins) is not loaded on this path.
      if (bitmap_.test(b)) {
        bin.insert(n);
      } else {
        bin.assign_sole(n);
        bitmap_.set(b);
      }
    } else {
      big_.insert(n);
    }
    ++count_;
  }

  void erase(Node* n) noexcept {
    if (const std::size_t b = bin_of(n->size); b < nbins_) {
      Bin& bin = this->bin(b);
      if (Bin::is_sole(n)) {  // the bin empties: written, not loaded
        bin.clear_sole();
        bitmap_.clear(b);
      } else {
        bin.erase(n);  // the bin had two blocks or more: it keeps one
      }
    } else {
      big_.erase(n);
    }
    --count_;
  }

  /// The best fit: the smallest block with size >= `size`, lowest address among equals.
  [[nodiscard]] Node* lower_bound(std::size_t size) const noexcept {
    const std::size_t b = size <= granule ? 0 : bin_of((size + granule - 1) & ~(granule - 1));
    if (b < nbins_) {
      if (const std::size_t j = bitmap_.next(b); j != HierarchicalBitmap::npos) return bin(j).first();
      return big_.first();
    }
    return big_.lower_bound(size);
  }

  [[nodiscard]] Node* first() const noexcept { return lower_bound(0); }
  [[nodiscard]] Node* last() const noexcept {
    if (Node* n = big_.last()) return n;
    const std::size_t j = bitmap_.prev(nbins_ - 1);
    return j == HierarchicalBitmap::npos ? nullptr : bin(j).last();
  }

  /// The next block in (size, address) order.
  [[nodiscard]] Node* next(Node* n) const noexcept {
    if (Node* m = FreeTree<Node>::next(n)) return m;
    const std::size_t b = bin_of(n->size);
    if (b >= nbins_) return nullptr;
    if (const std::size_t j = b + 1 < nbins_ ? bitmap_.next(b + 1) : HierarchicalBitmap::npos;
        j != HierarchicalBitmap::npos) {
      return bin(j).first();
    }
    return big_.first();
  }

  /// The previous block in (size, address) order.
  [[nodiscard]] Node* prev(Node* n) const noexcept {
    if (Node* m = FreeTree<Node>::prev(n)) return m;
    std::size_t b = bin_of(n->size);
    if (b >= nbins_) b = nbins_;
    if (b == 0) return nullptr;
    const std::size_t j = bitmap_.prev(b - 1);
    return j == HierarchicalBitmap::npos ? nullptr : bin(j).last();
  }

  [[nodiscard]] bool contains(const Node* n) const noexcept {
    const std::size_t b = bin_of(n->size);
    return b < nbins_ ? chunks_[b / chunk_bins] != nullptr && bin(b).contains(n) : big_.contains(n);
  }

  /// Checks every bin, the bitmap and the counts; throws std::logic_error.
  void check() const {
    std::size_t total = big_.size();
    big_.check();
    for (Node* n = big_.first(); n != nullptr; n = FreeTree<Node>::next(n)) {
      if (bin_of(n->size) < nbins_) throw std::logic_error("free index: a small block sits in the big-block tree");
    }
    // Walk the set bits only (a full scan of every bin would make validate() slow); a non-empty
    // bin without its bit shows up as a count mismatch below.
    for (std::size_t b = bitmap_.next(0); b != HierarchicalBitmap::npos;
         b = b + 1 < nbins_ ? bitmap_.next(b + 1) : HierarchicalBitmap::npos) {
      if (chunks_[b / chunk_bins] == nullptr || bin(b).empty()) {
        throw std::logic_error("free index: bitmap marks an empty bin");
      }
      bin(b).check();
      total += bin(b).size();
      for (Node* n = bin(b).first(); n != nullptr; n = FreeTree<Node>::next(n)) {
        if (bin_of(n->size) != b) throw std::logic_error("free index: a block sits in the wrong bin");
      }
    }
    if (total != count_) throw std::logic_error("free index: block count");
  }

 private:
  using Bin = FreeTree<Node>;
  static constexpr std::size_t chunk_bins = 4096;  // 2 MiB of sizes per chunk
  static std::size_t bin_of(std::size_t size) noexcept { return size / granule - 1; }
  // Only for bins whose chunk exists (a set bitmap bit implies it).
  [[nodiscard]] Bin& bin(std::size_t b) const noexcept { return chunks_[b / chunk_bins][b % chunk_bins]; }

  std::size_t nbins_;
  std::vector<std::unique_ptr<Bin[]>> chunks_;
  HierarchicalBitmap bitmap_;
  FreeTree<Node> big_;
  std::size_t count_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
