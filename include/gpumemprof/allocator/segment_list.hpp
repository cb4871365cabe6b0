// Layer 2: every segment of one allocator, in creation order, and the records they live in.
//
// Invariant: head()..tail() is a doubly linked list (Segment::list_prev/list_next) of the segments
// in use, oldest first; a record is either on that list (linked) or blank on the free list, never
// both. The caching allocator walks it (snapshots, validate, empty_cache) and changes it only
// under its device mutex; this class owns no lock.
#pragma once

#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

class SegmentList {
 public:
  /// A blank record for a new segment, not yet linked. May throw std::bad_alloc.
  [[nodiscard]] Segment* make() { return records_.get(); }
  /// Returns a record that is not linked (a segment that never came to be, or one unlinked).
  void recycle(Segment* s) noexcept { records_.put(s); }
  /// Appends `s` (the newest segment).
  void link(Segment* s) noexcept {
    s->list_prev = tail_;
    s->list_next = nullptr;
    (tail_ != nullptr ? tail_->list_next : head_) = s;
    tail_ = s;
  }
  /// Takes `s` out of the list (its record stays the caller's: recycle it).
  void unlink(Segment* s) noexcept {
    (s->list_prev != nullptr ? s->list_prev->list_next : head_) = s->list_next;
    (s->list_next != nullptr ? s->list_next->list_prev : tail_) = s->list_prev;
  }
  /// The oldest and the newest segment (null when there is none).
  [[nodiscard]] Segment* head() const noexcept { return head_; }
  [[nodiscard]] Segment* tail() const noexcept { return tail_; }

 private:
  ObjectPool<Segment> records_;
  Segment* head_ = nullptr;
  Segment* tail_ = nullptr;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
