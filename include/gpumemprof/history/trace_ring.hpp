// Layer 3: the event ring. History keeps the newest `capacity` events as fixed-size POD
// entries in chunks of 4096, so recording is one compare and a 48-byte store: no heap
// allocation except one chunk per 4096 events while the ring first fills, and no copying when
// it grows (an unbounded ring -- PyTorch's default -- just keeps adding chunks).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/trace_clock.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// One recorded event, before symbolization and time conversion.
struct RawTraceEntry {
  std::uint64_t addr = 0;  ///< for oom: the device's free bytes
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  TraceClock::Tick tick = 0;
  std::uint32_t stack = 0;     ///< StackTable id, 0 = no frames
  std::uint32_t metadata = 0;  ///< MetadataStrings id, 0 = ""
  std::uint32_t category = 0;  ///< MetadataStrings id of the block's memory category, 0 = none
  TraceAction action = TraceAction::alloc;
};

class TraceRing {
 public:
  static constexpr std::size_t max_chunk = 4096;

  explicit TraceRing(std::size_t capacity = 1) { reset(capacity); }
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  /// Empties the ring and sets how many entries it keeps (at least 1).
  void reset(std::size_t capacity) {
    cap_ = std::max<std::size_t>(capacity, 1);
    chunk_ = std::min(max_chunk, std::bit_ceil(std::min(cap_, max_chunk)));
    shift_ = static_cast<unsigned>(std::countr_zero(chunk_));
    chunks_.clear();
    run_ = cur_ = end_ = nullptr;
    run_start_ = 0;
    before_run_ = 0;
    dropped_earlier_ = 0;
  }

  /// Keeps the newest entries; the oldest is overwritten once the ring is full.
  void push(const RawTraceEntry& e) {
    if (GPUMEMPROF_UNLIKELY(cur_ == end_)) next_run();
    *cur_++ = e;
  }

  /// Calls f(const RawTraceEntry&) for every entry, oldest first.
  template <class F>
  void for_each(F&& f) const {
    const std::size_t n = size();
    std::size_t i = written() < cap_ ? 0 : head();
    for (std::size_t k = 0; k < n; ++k) {
      f(chunks_[i >> shift_][i & (chunk_ - 1)]);
      if (++i == cap_) i = 0;
    }
  }

  /// Keeps the newest min(size(), capacity) entries under a new capacity.
  void set_capacity(std::size_t capacity) {
    if (std::max<std::size_t>(capacity, 1) == cap_) return;
    std::vector<RawTraceEntry> keep;
    keep.reserve(size());
    for_each([&keep](const RawTraceEntry& e) { keep.push_back(e); });
    const std::size_t dropped_before = dropped();
    reset(capacity);
    const std::size_t from = keep.size() > cap_ ? keep.size() - cap_ : 0;
    for (std::size_t i = from; i < keep.size(); ++i) push(keep[i]);
    dropped_earlier_ = dropped_before + from;
  }

  [[nodiscard]] std::size_t size() const noexcept { return std::min(written(), cap_); }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  /// Entries overwritten since the last reset.
  [[nodiscard]] std::size_t dropped() const noexcept { return written() - size() + dropped_earlier_; }

 private:
  // Entries pushed since the reset (counting overwritten ones).
  [[nodiscard]] std::size_t written() const noexcept { return before_run_ + static_cast<std::size_t>(cur_ - run_); }
  // The ring index of the next write.
  [[nodiscard]] std::size_t head() const noexcept {
    const std::size_t h = run_start_ + static_cast<std::size_t>(cur_ - run_);
    return h == cap_ ? 0 : h;
  }

  // The current run (the slots up to the end of a chunk or of the ring) is full: move to the
  // next, allocating its chunk the first time round.
  GPUMEMPROF_NOINLINE void next_run() {
    before_run_ += static_cast<std::size_t>(cur_ - run_);
    run_start_ = head();
    const std::size_t c = run_start_ >> shift_;
    if (c == chunks_.size()) chunks_.push_back(std::make_unique_for_overwrite<RawTraceEntry[]>(chunk_));
    run_ = cur_ = chunks_[c].get() + (run_start_ & (chunk_ - 1));
    end_ = run_ + (std::min((c + 1) << shift_, cap_) - run_start_);
  }

  std::vector<std::unique_ptr<RawTraceEntry[]>> chunks_;
  std::size_t cap_ = 1;
  std::size_t chunk_ = 1;  // entries per chunk, a power of two
  unsigned shift_ = 0;
  // Writing happens in runs of contiguous slots: [run_, end_) at ring index run_start_.
  RawTraceEntry* run_ = nullptr;
  RawTraceEntry* cur_ = nullptr;
  RawTraceEntry* end_ = nullptr;
  std::size_t run_start_ = 0;
  std::size_t before_run_ = 0;       // entries written before the current run
  std::size_t dropped_earlier_ = 0;  // dropped under an earlier capacity (set_capacity)
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
