// Layer 2: the caching device allocator, with PyTorch's default policy (PYTORCH-COMPAT.md).
//
// Requests are rounded (size_policy.hpp) and served from one of two pools -- small (<= 1 MiB,
// 2 MiB segments) and large -- by best fit among the free blocks of the *same stream*, ordered
// by (size, address). A block larger than needed is split; a freed block merges with free
// neighbours. When nothing fits, a new segment comes from the device; when the device is full,
// the OOM sequence frees cached memory and retries once before throwing OutOfMemoryError.
// A block used on other streams (record_stream) is reused only after events recorded on those
// streams at free time complete.
//
// With expandable_segments:True (a backend with virtual memory), each (pool, stream) gets an
// address range reserved once (9/8 of the device's memory) and backed page by page
// (the backend's granularity, 2 MiB) as it fills: blocks tile the whole reservation, and a
// block is either mapped (allocated, pending or free) or an unmapped hole. Reserved bytes are
// mapped bytes. When a request does not fit a free mapped block, the run of free and unmapped
// blocks that holds it with the fewest pages to map is mapped; fresh pages are taken while
// reserved stays within 2.5% above the most bytes ever live, and beyond that pages lying wholly
// inside free blocks elsewhere are unmapped first (their stream synchronized) and reused. A
// small request that would move a page that way takes a free block of the large pool instead.
// empty_cache() and the OOM sequence unmap every free page.
//
// Concurrency. Every block of a segment belongs to the segment's stream, so the free structures
// of one stream never touch another stream's blocks: each stream has a shard (its own spin lock,
// its small and large free trees, a free list of block records, a stat journal), found without a
// lock. Allocated blocks are found by address in a pointer map split into address-hashed
// buckets, each with a spin lock. The statistics (with the peak windows and lifetime totals) sit
// behind one more spin lock, but the hot path does not take it. While one stream has a shard,
// that shard's lock orders everything: the hot path writes the stats directly, and readers hold
// the shard too. From the second shard on, the hot path appends its stat changes to its shard's
// journal (stats_journal.hpp), stamped with a clock readable on every core, and a fold applies
// the journals' records in stamp order under the stats lock -- by the thread whose operation
// fills a journal, on entry to every exclusive section, and before every reader (memory_stats,
// gauges, peak windows, resets, with_lock, validate). So every stat, and every peak, is that of
// one serial order of the operations consistent with real time (fold_locked() argues why), and
// threads on different streams share no line per operation. Lock order: device mutex, fold lock, shards in creation
// order, pointer-map buckets, statistics.
//
// The hot path (allocate/deallocate of a cached size) takes its stream's shard and one bucket,
// does one tree lookup and one hash-table operation each way, appends one journal record (with
// more than one shard), and allocates heap memory only when a journal outgrows its buffer.
// Everything else -- new segments, the OOM sequence, cross-stream events, empty_cache, expandable
// growth (which unmaps other streams' pages), introspection -- runs exclusively: the device mutex,
// the fold lock, every shard and the stats lock (ExclusiveLock), with every journal folded first,
// so the slow paths read and write exact stats directly. The backend is called only there.
// A new segment's backend malloc (cudaMalloc: up to milliseconds) runs with less held
// (ExclusiveLock::released_during), and every lock is back (and every journal folded again)
// before the result is used, so the single-threaded sequence (and so PyTorch parity) is
// unchanged: by default the device mutex and the allocating stream's shard stay held -- no other
// slow path runs and that stream waits, as in PyTorch -- while other streams' hot paths and stats
// readers go on (folds skip the held shard: it has nothing to fold); with
// release_lock_on_cudamalloc:True nothing is held, as PyTorch's alloc_block does with that option
// (then anything may change across the call; the memory fraction counts mallocs in flight).
// PyTorch holds its lock across every cudaFree; here empty_cache and the OOM sequence free whole
// segments holding only the device mutex (cudaFree synchronizes the device), having taken them out
// of their streams' trees first. Expandable map/unmap calls run under the whole ExclusiveLock.
// The hot path is in caching_allocator_hot-inl.hpp, the slow paths in caching_allocator_segments-inl.hpp.
//
// Exceptions. An operation first does what may throw (a block record, room in a free tree or
// the pointer map or the journal, the events of a cross-stream free) and only then changes
// anything, so std::bad_alloc or a device error out of allocate(), deallocate() or
// record_stream() leaves the allocator as it was; empty_cache() and the OOM sequence keep what
// their steps did so far, every byte accounted for. Folds allocate nothing (gauges() is noexcept).
// tests/allocator/test_exception_safety.cpp fails each heap allocation of each operation in turn.
//
// Streams the user destroys: release_stream() (before cudaStreamDestroy) waits for the stream,
// returns its cached memory and moves its remaining segments to the default stream, so nothing
// names the handle afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/block.hpp"
#include "gpumemprof/allocator/event_sinks.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/free_index.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/peak_windows.hpp"
#include "gpumemprof/allocator/pointer_map.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/allocator/stats_journal.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/locked_shards.hpp"
#include "gpumemprof/detail/spin_lock.hpp"
#include "gpumemprof/detail/thread_category.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct Snapshot;  // history/snapshot.hpp; CachingAllocator::snapshot() is defined in the history layer

/// Values readable at any time, all of one consistent instant (see gauges()). Byte values in bytes.
struct AllocatorGauges {
  std::int64_t allocated_bytes = 0;       ///< allocated_bytes.all.current
  std::int64_t reserved_bytes = 0;        ///< reserved_bytes.all.current
  std::int64_t active_bytes = 0;          ///< active_bytes.all.current
  std::int64_t inactive_split_bytes = 0;  ///< inactive_split_bytes.all.current
  std::int64_t requested_bytes = 0;       ///< requested_bytes.all.current
  std::int64_t allocations = 0;           ///< allocation.all.current
  // Lifetime totals: never reset (reset_accumulated_memory_stats leaves them alone).
  std::uint64_t total_allocations = 0;
  std::uint64_t total_frees = 0;
  std::uint64_t total_allocated_bytes = 0;
  std::uint64_t total_freed_bytes = 0;
};

template <DeviceBackend Backend>
class CachingAllocator {
 public:
  using backend_type = Backend;
  using OomObserver = std::function<void(const OomInfo&)>;

  /// An allocator over `backend`, configured by `config` (default: $GPUMEMPROF_ALLOC_CONF).
  explicit CachingAllocator(Backend backend, AllocatorConfig config = AllocatorConfig::from_env());
  /// Returns every segment to the device. Pointers still allocated become invalid.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// `bytes` of device memory for work on `stream`; nullptr for 0 bytes.
  /// Throws OutOfMemoryError when the device cannot provide it even after freeing the cache.
  [[nodiscard]] void* allocate(std::size_t bytes, Stream stream = {});

  /// Returns memory from allocate(). nullptr is ignored. A pointer this allocator did not hand
  /// out (or already took back) throws InvalidPointerError and changes nothing.
  void deallocate(void* ptr);

  /// Marks `ptr` as used by work on `stream`: after deallocate() the block is reused only once
  /// that stream's work queued so far has completed. No-op for the block's own stream.
  void record_stream(void* ptr, Stream stream);

  /// Waits for outstanding cross-stream events and returns every fully free segment to the device.
  void empty_cache();

  /// Call before destroying `stream` (cudaStreamDestroy): waits for its work and its pending
  /// events, gives its cached memory back to the device, and moves its segments that still hold
  /// allocations to the default stream, so the allocator never uses the handle again and a new
  /// stream with the same handle starts with no memory. Allocations made on `stream` stay valid;
  /// free them as usual. Do not queue work on `stream` after this call. Throws
  /// std::invalid_argument for the default stream.
  void release_stream(Stream stream);

  [[nodiscard]] MemoryStats memory_stats() const;
  void reset_peak_memory_stats();
  void reset_accumulated_memory_stats();

  /// Caps reserved memory at `fraction` of the device's total memory (0..1).
  void set_memory_fraction(double fraction);

  /// PyTorch-schema snapshot of segments, blocks and the recorded history: the same as
  /// gmp::snapshot(*this), defined in gpumemprof/history/snapshot_builder.hpp (included by
  /// gpumemprof.hpp).
  [[nodiscard]] Snapshot snapshot() const;

  /// Checks every invariant (block tiling, indexes, stats recount); throws std::logic_error
  /// naming the first broken one.
  void validate() const;

  /// Cheap readings for samplers and profilers: folds the shards' stat journals (each shard's lock
  /// briefly, never the device mutex; while with_lock() holds every shard, none) and reads under
  /// the statistics' spin lock.
  [[nodiscard]] AllocatorGauges gauges() const noexcept;

  /// Per-interval peaks of allocated bytes (see peak_windows.hpp); the global peak is untouched.
  [[nodiscard]] std::uint64_t open_peak_window();
  /// The peak (bytes) since the window opened; closes it.
  std::int64_t close_peak_window(std::uint64_t id);
  /// The peak (bytes) since the window opened; keeps it open.
  [[nodiscard]] std::int64_t peak_window(std::uint64_t id) const;

  /// Adds a sink of every allocator event (event_sinks.hpp); returns its slot. Not owned: remove
  /// it before it goes away. Throws std::length_error when all slots are taken.
  std::size_t add_event_sink(const AllocatorEventSink& sink);
  /// Removes the sink in `slot`; once this returns, the sink is not called again.
  void remove_event_sink(std::size_t slot);
  /// Number of event sinks attached now.
  [[nodiscard]] std::size_t event_sink_count() const;
  /// Called (outside the lock) before OutOfMemoryError is thrown.
  void attach_oom_observer(OomObserver observer);

  /// Every segment with its blocks, in creation order. An expandable segment shows as one
  /// segment per run of mapped pages (as in PyTorch's snapshots), unmapped holes left out.
  [[nodiscard]] std::vector<SegmentView> segments() const;
  /// Visits the segments under the allocator's lock; `f(const SegmentView&)` must not call back.
  template <class F>
  void visit_segments(F&& f) const;

  /// A consistent view of the allocator, valid only inside with_lock().
  class LockedView {
   public:
    /// Visits every segment, in creation order.
    template <class F>
    void visit_segments(F&& f) const {
      for (const Segment* s = a_.segments_head_; s != nullptr; s = s->list_next) a_.for_each_view(*s, f);
    }
    [[nodiscard]] const MemoryStats& stats() const noexcept { return stats_; }

   private:
    friend class CachingAllocator;
    // The stats are copied once under the stats lock: with every shard held no allocation or
    // free changes them, and f() then runs without the stats lock, so samplers (gauges(),
    // peak windows) keep reading while a snapshot is taken.
    explicit LockedView(const CachingAllocator& a) : a_(a) {
      std::lock_guard lock(a.stats_lock_);
      stats_ = a.stats_;
    }
    const CachingAllocator& a_;
    MemoryStats stats_;
  };
  /// Runs `f(const LockedView&)` under the allocator's lock and returns its result: no allocator
  /// event happens meanwhile. `f` must not call the allocator (it would deadlock).
  template <class F>
  decltype(auto) with_lock(F&& f) const {
    ExclusiveLock lock(*this, /*with_stats=*/false);
    return std::forward<F>(f)(LockedView(*this));
  }

  /// The device's own account (cudaMemGetInfo), including memory this allocator does not own.
  [[nodiscard]] MemInfo mem_get_info() const { return backend_.mem_get_info(); }
  [[nodiscard]] const AllocatorConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] Backend& backend() noexcept { return backend_; }
  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }
  [[nodiscard]] int device_index() const { return backend_.index(); }
  [[nodiscard]] std::string device_name() const { return backend_.name(); }

 private:
  using Block = detail::Block;
  using Segment = detail::Segment;
  using Tree = detail::FreeIndex<Block>;
  using Records = detail::ObjectPool<Block>;

  // FreeIndex bins cover sizes up to these: small blocks never exceed their 2 MiB segment, and
  // larger free blocks are few (one tree holds them).
  static constexpr std::size_t kSmallExact = kSmallBuffer;
  static constexpr std::size_t kLargeExact = std::size_t{256} << 20;

  // The thread whose operation makes its shard's journal a multiple of this long folds (once
  // per kFoldAt operations: a fold under way elsewhere is not retried on every operation).
  static constexpr std::size_t kFoldAt = 256;
  // Past this many records (40 MiB) a journal's thread waits for the fold lock: only a folder
  // stopped for long (a debugger) gets there. Waiting earlier costs more than it saves: on a
  // loaded 2-core VM a folder is often descheduled for milliseconds, and at 16 * kFoldAt the
  // waits made two threads 3-4x slower.
  static constexpr std::size_t kFoldWait = 4096 * kFoldAt;

  // One stream's free structures. Created under the device mutex, never destroyed while the
  // allocator lives (so a Shard& stays valid without a lock).
  struct alignas(64) Shard {  // its own lines: two streams never share one
    explicit Shard(Stream s) : stream(s), trees{Tree(kLargeExact), Tree(kSmallExact)} {
      carried.records.reserve(2 * kFoldAt);
      fresh.records.reserve(2 * kFoldAt);
    }
    // A spin lock, not std::mutex: one atomic exchange per hot operation fewer (unlock is a
    // store), and waiters on a shared stream spin instead of sleeping (measured on the H100
    // host's 16 cores, bench/RESULTS.md). Slow paths may hold it across a device call; waiters
    // then yield.
    detail::SpinLock mutex;
    // A fold waits for `mutex` (on the same line): the hot path lets it go first, else the
    // owner, relocking within nanoseconds of each unlock, starves the folder's spin.
    std::atomic<bool> fold_waiting{false};
    // The hot path's entry: waits while a fold wants this shard (no lock held).
    void yield_to_fold() const noexcept {
      if (GPUMEMPROF_UNLIKELY(fold_waiting.load(std::memory_order_relaxed))) {
        detail::spin_while([this] { return fold_waiting.load(std::memory_order_relaxed); });
      }
    }
    // A folder's or an exclusive section's lock (fold_mutex_ held: one such taker at a time).
    void lock_for_fold() noexcept {
      fold_waiting.store(true, std::memory_order_relaxed);
      mutex.lock();
      fold_waiting.store(false, std::memory_order_relaxed);
    }
    Stream stream;
    Tree trees[2];                             // [0] large pool, [1] small pool
    Records records;                           // block records split off and merged away under `mutex`
    detail::StatJournal journal{2 * kFoldAt};  // stat changes of the hot path (journaling_), under `mutex`
    // Under fold_mutex_: the records a fold left (stamped after its cut), and those it took from
    // the journal (by swapping buffers; empty between folds).
    alignas(64) detail::StatRun carried;
    detail::StatRun fresh;
    // Under fold_mutex_: held across a backend call by an exclusive section (released_during),
    // with nothing to fold. Folds and read_stats skip it instead of waiting.
    mutable std::atomic<bool> parked{false};
  };
  // Creation order; changed under device_mutex_ and fold_mutex_, so either lock suffices to read.
  using Shards = std::vector<std::unique_ptr<Shard>>;

  struct Pool {
    bool small = false;
    StatPool stat_pool = StatPool::large_pool;
    std::atomic<std::uint64_t> free_lookups{0};  // PyTorch's get_free_blocks_call_count (GC ages)
    const Shards* shards = nullptr;

    // Slow paths only (device mutex held): the free tree of `s` in this pool.
    Tree* find(Stream s) const noexcept {
      for (const auto& sh : *shards) {
        if (sh->stream == s) return &sh->trees[small];
      }
      return nullptr;
    }
    Tree& at(Stream s) const noexcept { return *find(s); }  // a block's stream always has a shard
    template <class F>
    void for_each_tree(F&& f) const {
      for (const auto& sh : *shards) f(sh->stream, sh->trees[small]);
    }
  };

  // The device mutex, the fold lock, every shard (creation order) and the statistics: nothing
  // else runs. Every journal is folded on entry, so the slow path reads and writes exact stats.
  class ExclusiveLock {
   public:
    // with_stats = false: for readers only (with_lock), which copy the stats under their lock.
    // They let the fold lock and the stats go: no journal grows while every shard is held, so
    // readers meanwhile fold nothing (quiescent_) and read the stats.
    explicit ExclusiveLock(const CachingAllocator& a, bool with_stats = true) : a_(a), stats_(with_stats) {
      take(false, nullptr);
    }
    ~ExclusiveLock() { unlock(); }
    ExclusiveLock(const ExclusiveLock&) = delete;
    ExclusiveLock& operator=(const ExclusiveLock&) = delete;
    void unlock() noexcept {
      if (!held_) return;
      held_ = false;
      give_back(false, nullptr);
    }
    // Runs f() -- one backend call that may wait -- holding only the device mutex (unless
    // !keep_device) and `keep_shard`'s lock (if any), and takes the rest back before returning or
    // throwing. With the device mutex kept, only the free trees of the shards let go, the pointer
    // map and the stats may have moved meanwhile; without it, anything.
    template <class F>
    decltype(auto) released_during(bool keep_device, const Shard* keep_shard, F&& f) {
      give_back(keep_device, keep_shard);
      struct Retake {
        ExclusiveLock& lock;
        bool device;
        const Shard* shard;
        ~Retake() { lock.take(device, shard); }
      } retake{*this, keep_device, keep_shard};
      return std::forward<F>(f)();
    }

   private:
    // Takes what give_back(device_held, kept) let go. With the device mutex held, the shards are
    // taken in any order (only the device mutex's holder ever holds two), and the stats lock,
    // innermost, last.
    // The fold lock comes after the device mutex; a kept shard stays "parked" meanwhile (folds
    // and read_stats skip it, so none waits for it holding the fold lock), and every journal is
    // folded again once all shards are back: other streams went on meanwhile.
    void take(bool device_held, const Shard* kept) {
      if (!device_held) a_.device_mutex_.lock();
      a_.fold_mutex_.lock();
      if (kept != nullptr) kept->parked.store(false, std::memory_order_relaxed);
      for (const auto& sh : a_.shards_) {
        if (sh.get() != kept) sh->lock_for_fold();  // the fold handshake: a busy hot path lets it in
      }
      a_.fold_locked(/*all_held=*/true);
      if (stats_) {
        a_.stats_lock_.lock();
      } else {
        a_.quiescent_.store(true, std::memory_order_release);
        a_.fold_mutex_.unlock();
      }
    }
    void give_back(bool keep_device, const Shard* kept) noexcept {
      if (stats_) {
        a_.stats_lock_.unlock();
      } else {
        // A reader that saw quiescent_ reads holding the fold lock and no shard (read_stats):
        // the shards stay held until it is done. Taking the fold lock with the shards held
        // inverts the lock order, safely: while quiescent_ is set no holder of the fold lock
        // waits for a shard (folds and read_stats skip them), and the device mutex (held)
        // keeps out every other taker of shards.
        a_.fold_mutex_.lock();
        a_.quiescent_.store(false, std::memory_order_relaxed);
      }
      // Under the fold lock (readers keep no shard): its journal is empty, all folded on
      // entry, and stays so while it is held.
      if (kept != nullptr) kept->parked.store(true, std::memory_order_relaxed);
      for (auto it = a_.shards_.rbegin(); it != a_.shards_.rend(); ++it) {
        if (it->get() != kept) (*it)->mutex.unlock();
      }
      a_.fold_mutex_.unlock();
      if (!keep_device) a_.device_mutex_.unlock();
    }
    const CachingAllocator& a_;
    bool stats_;
    bool held_ = true;
  };

  struct PendingEvent {
    Event event;
    Block* block;
  };
  struct StreamEvents {
    Stream stream;
    std::deque<PendingEvent> queue;  // in recording order
  };

  // --- hot path helpers ---
  [[nodiscard]] std::size_t round(std::size_t bytes) const noexcept {
    if (GPUMEMPROF_LIKELY(!has_roundup_)) {
      return bytes < kMinBlockSize ? kMinBlockSize : (bytes + kMinBlockSize - 1) & ~(kMinBlockSize - 1);
    }
    return round_size(bytes, cfg_);
  }
  Pool& pool_of(const Block* b) noexcept { return b->small_pool ? small_ : large_; }
  // The stream's shard: a lock-free scan of the first kFastShards, else under the device mutex.
  Shard& shard_for(Stream s) {
    Shard* sh = find_fast_shard(s);
    return sh != nullptr ? *sh : shard_slow(s);
  }
  Shard* find_fast_shard(Stream s) const noexcept {
    const std::size_t n = fast_count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      if (fast_streams_[i].load(std::memory_order_relaxed) == s.id)
        return fast_shards_[i].load(std::memory_order_relaxed);
    }
    return nullptr;
  }
  Shard& shard_slow(Stream s);
  Shard& add_shard(Stream s);
  Shard& add_shard_exclusive(Stream s);
  // The pointer-map bucket of an address (bits that PointerMap's own hash does not use).
  static std::size_t bucket_hash(std::uintptr_t addr) noexcept {
    return static_cast<std::size_t>(((addr >> 9) * 0xD6E8FEB86659FD93ull) >> 32);
  }
  auto& bucket_of(std::uintptr_t addr) noexcept { return ptrs_.at(bucket_hash(addr)); }
  // validate() only (every shard held: the map stands still).
  [[nodiscard]] const Block* find_pointer(std::uintptr_t addr) const noexcept {
    return ptrs_.at(bucket_hash(addr)).value.find(addr);
  }
  // The best fit in `tree` under the policy; it stays in the tree (hand_out takes it out).
  Block* find_free_block(Tree& tree, Pool& pool, std::size_t size);
  // Hands out `block`, a free block in its shard's tree: first everything that may throw (a
  // record for the split, tree and pointer-map room, journal room), so that a failure leaves the
  // block where it was; then the changes, which cannot throw. journal_length: the hot path
  // (record(); receives its result); nullptr: exclusive (the stats are applied now, the stats
  // lock being held).
  Block* hand_out(Shard& shard, Pool& pool, Block* block, std::size_t size, std::size_t requested,
                  std::size_t* journal_length);
  // Room in `tree` for `b` merged with its free neighbours, so that free_block(tree, ..., b)
  // cannot throw. May throw std::bad_alloc: call before changing anything.
  static void reserve_free(Tree& tree, const Block* b) {
    std::size_t merged = b->size;
    for (const Block* n : {b->prev, b->next}) {
      if (n != nullptr && n->is_free() && n->mapped == b->mapped) merged += n->size;
    }
    tree.reserve(merged);
  }
  void insert_free(Pool& pool, Block* b) { insert_free(pool, pool.at(b->stream), b); }
  static void insert_free(Pool& pool, Tree& tree, Block* b) {
    b->gc_base = pool.free_lookups.load(std::memory_order_relaxed);
    tree.insert(b);
  }
  // Merges a freed block with free neighbours and files it; the stat changes are returned.
  detail::StatRecord free_block(Tree& tree, Records& records, Block* b, bool deferred);
  // The stat changes of one operation (stats lock held): a block handed out; a block no longer
  // allocated (deallocate); a block free again (at once, or once its events complete).
  void apply_alloc(const detail::StatRecord& r) const noexcept;
  void apply_unallocate(StatPool pool, std::int64_t size) const noexcept;
  void apply_free(const detail::StatRecord& r) const noexcept;
  void apply_inactive(const detail::StatRecord& r) const noexcept {
    if (r.inactive_bytes > 0) stat_add(stats_.inactive_split_bytes, r.pool, r.inactive_bytes);
    if (r.inactive_bytes < 0) stat_sub(stats_.inactive_split_bytes, r.pool, -r.inactive_bytes);
    if (r.inactive_blocks > 0) stat_add(stats_.inactive_split, r.pool, r.inactive_blocks);
    if (r.inactive_blocks < 0) stat_sub(stats_.inactive_split, r.pool, -r.inactive_blocks);
  }
  void apply_record(const detail::StatRecord& r) const noexcept {
    if (r.is_free) {
      apply_unallocate(r.pool, r.size);
      apply_free(r);
    } else {
      apply_alloc(r);
    }
  }
  // Applies the journals' records in stamp order (fold_mutex_ held; all_held: every shard too).
  void fold_locked(bool all_held) const;
  // Runs f() under the stats lock with the stats exact: the journals folded or, with no journal
  // (one shard, whose hot path writes the stats directly), that shard held.
  template <class F>
  decltype(auto) read_stats(F&& f) const {
    std::lock_guard fold_lock(fold_mutex_);
    Shard* held = nullptr;
    if (journaling_) {
      fold_locked(false);
    } else if (!shards_.empty() && !quiescent_.load(std::memory_order_acquire) &&
               !shards_.front()->parked.load(std::memory_order_relaxed)) {
      held = shards_.front().get();
      held->lock_for_fold();
    }
    struct Release {
      Shard* shard;
      ~Release() {
        if (shard != nullptr) shard->mutex.unlock();
      }
    } release{held};
    std::lock_guard stats(stats_lock_);
    return std::forward<F>(f)();
  }
  // The stat changes of a hot operation, its shard held: journaled (returns the journal's new
  // length), or applied at once (returns 0).
  std::size_t record(Shard& shard, const detail::StatRecord& r) {
    if (journaling_) return shard.journal.append(r);
    apply_record(r);
    return 0;
  }
  static bool fold_due(std::size_t journal_length) noexcept {
    return journal_length != 0 && journal_length % kFoldAt == 0;
  }
  // After a hot operation filled its journal (no lock held): fold, unless another thread is --
  // then that fold takes this journal too. Past kFoldWait records wait for the lock instead: a
  // journal must not grow without bound.
  GPUMEMPROF_NOINLINE void try_fold(std::size_t journal_length) const {
    std::unique_lock lock(fold_mutex_, std::try_to_lock);
    if (!lock.owns_lock() && journal_length >= kFoldWait) lock.lock();
    if (lock.owns_lock()) fold_locked(false);
  }
  // A deferred free (events complete), run exclusively.
  void free_block_exclusive(Block* b) {
    Pool& pool = pool_of(b);
    apply_free(free_block(pool.at(b->stream), block_records_, b, /*deferred=*/true));
  }
  std::size_t try_merge(Block* dst, Block* src, Pool& pool) {
    return try_merge(dst, src, pool.at(dst->stream), block_records_);
  }
  static std::size_t try_merge(Block* dst, Block* src, Tree& tree, Records& records);
  static void stat_add(StatArray& s, StatPool p, std::int64_t n) noexcept {
    s[StatPool::all].increase(n);
    s[p].increase(n);
  }
  static void stat_sub(StatArray& s, StatPool p, std::int64_t n) noexcept {
    s[StatPool::all].decrease(n);
    s[p].decrease(n);
  }
  AllocatorGauges gauges_locked() const noexcept;
  void debug_validate() const {
#if GPUMEMPROF_DEBUG_VALIDATE
    validate();  // called with no lock held
#endif
  }

  // --- slow paths (caching_allocator_segments-inl.hpp) ---
  GPUMEMPROF_NOINLINE Block* allocate_exclusive(Shard& shard, Pool& pool, Stream stream, std::size_t size,
                                                std::size_t requested);
  GPUMEMPROF_NOINLINE void deallocate_exclusive(void* ptr);
  Block* allocate_slow(Shard& shard, Pool& pool, Stream stream, std::size_t size, std::size_t requested,
                       ExclusiveLock& lock);
  Block* new_segment(Shard& shard, Pool& pool, std::size_t segment_bytes, bool is_retry, ExclusiveLock& lock);
  // Expandable segments (caching_allocator-inl.hpp).
  Block* grow_expandable(Pool& pool, Stream stream, std::size_t size, bool is_retry);
  Block* find_expandable_run(const Pool& pool, Stream stream, std::size_t size) const;
  Block* take_spill(Stream stream, std::size_t size);  // a free large block for a small request
  Block* new_reservation(Pool& pool, Stream stream);
  Block* map_block(Block* unmapped, std::size_t bytes);
  void unmap_pages(Block* free_block, std::uintptr_t addr, std::size_t bytes);
  std::size_t recycle_pages(std::size_t wanted, std::uintptr_t keep_begin, std::uintptr_t keep_end);
  std::size_t pages_to_recycle(std::size_t size, std::size_t need);
  void release_expandable();
  void release_expandable_segment(Segment* s, bool synced);
  void rehome_segment(Segment* s, Shard& home);
  void release_reservation(Segment* s);
  void unlink_segment(Segment* s);
  void link_segment(Segment* s);
  [[nodiscard]] std::size_t span_of(const Segment& s) const noexcept {
    return s.expandable ? s.reservation.size : s.size;
  }
  template <class F>
  void for_each_view(const Segment& s, F&& f) const;
  void release_segment(Block* whole);
  void forget_segment(Block* whole);
  bool release_available_cached_blocks(Pool& pool, Stream stream, std::size_t size);
  // With `lock`, cudaFree runs holding only the device mutex (release_pool).
  void release_cached_blocks(ExclusiveLock* lock = nullptr);
  void release_pool(Pool& pool, ExclusiveLock* lock);
  void garbage_collect_cached_blocks();
  void process_events();
  void insert_events(Block* b);
  void synchronize_and_free_events();
  void synchronize_queue(std::deque<PendingEvent>& q);
  // Throws InvalidPointerError explaining `ptr` (takes the exclusive lock; call with none held).
  [[noreturn]] GPUMEMPROF_NOINLINE void invalid_pointer(const void* ptr, const char* what) const {
    ExclusiveLock lock(*this);
    throw_invalid_pointer(ptr, what);
  }
  [[noreturn]] void throw_invalid_pointer(const void* ptr, const char* what) const;
  [[noreturn]] void throw_oom(Pool& pool, Stream stream, std::size_t size, std::size_t requested, ExclusiveLock& lock);
  std::uint64_t notify(TraceAction action, std::uintptr_t addr, std::size_t size, Stream stream,
                       std::uint64_t context = 0, bool deferred = false, std::uint32_t category = 0) {
    if (GPUMEMPROF_LIKELY(sinks_.count() == 0)) return 0;
    return sinks_.emit({action, addr, size, stream, context, deferred, category});
  }
  // A block's alloc/free events carry its context handle and category.
  std::uint64_t notify_block(TraceAction action, const Block& b, bool deferred = false) {
    return notify(action, b.addr, b.requested, b.stream, b.context, deferred, b.category);
  }
  void validate_locked() const;
  static BlockView view_of(const Block& b);

  Backend backend_;
  AllocatorConfig cfg_;
  bool has_roundup_ = false;  // any roundup_power2_divisions > 1 configured
  bool gc_active_ = false;    // memory fraction and garbage_collection_threshold both set (written exclusively)
  bool expandable_ = false;   // expandable_segments:True on a backend with virtual memory
  // More than one shard: the hot path journals its stats. Set under the device mutex, the fold
  // lock and the first shard; read under any shard (or the fold lock).
  bool journaling_ = false;
  std::size_t page_ = 0;  // the backend's mapping granularity (expandable only)
  // Expandable growth maps fresh pages, not recycled ones, while reserved stays within this
  // fraction above the most bytes ever live (live_high_): see pages_to_recycle. The goal is
  // <= 1.03x peak requested and <= PyTorch's expandable figure (1.0255x on resnet50_train).
  static constexpr double kExpandableSlack = 0.025;
  std::size_t live_high_ = 0;

  // Guarded by device_mutex_ (and so by ExclusiveLock): the shard list, segments, events, the
  // slow paths' record pools, reserved bytes, the memory fraction, OOM observers. sinks_ and
  // gc_active_ change only exclusively, so any shard lock suffices to read them.
  mutable std::mutex device_mutex_;
  Shards shards_;
  static constexpr std::size_t kFastShards = 16;
  std::array<std::atomic<Shard*>, kFastShards> fast_shards_{};  // the first shards, published lock-free
  // Their streams, scanned by the lookup: read-only lines. (Comparing sh->stream instead reads
  // each earlier shard's first line, which its owner writes on every operation -- its lock --
  // and cost 8 threads on their own streams ~0.9 us per pair on the H100 host.)
  std::array<std::atomic<std::uintptr_t>, kFastShards> fast_streams_{};
  std::atomic<std::size_t> fast_count_{0};
  Pool small_;
  Pool large_;
  // Allocated blocks by address. 256 buckets: threads on different streams rarely share one.
  detail::LockedShards<detail::PointerMap<Block>, 256> ptrs_;
  Records block_records_;
  detail::ObjectPool<Segment> segment_records_;
  Segment* segments_head_ = nullptr;  // all segments, creation order
  Segment* segments_tail_ = nullptr;
  std::vector<StreamEvents> events_;
  std::atomic<std::size_t> pending_events_{0};  // written exclusively; read by the hot path
  std::size_t total_reserved_ = 0;              // bytes held from the device
  std::size_t reserving_ = 0;                   // bytes of new segments in backend mallocs now
  std::optional<std::size_t> allowed_max_;      // set_memory_fraction
  detail::EventSinks sinks_;
  std::vector<OomObserver> oom_observers_;

  // Folds: one at a time (fold_mutex_), lock order device mutex, fold_mutex_, shards. Written
  // per fold, so on a line of their own (the hot path reads journaling_ on every operation).
  alignas(64) mutable std::mutex fold_mutex_;
  mutable std::atomic<bool> quiescent_{false};       // a with_lock() section holds every shard
  mutable std::vector<detail::StatRun*> fold_runs_;  // a fold's non-empty runs, under fold_mutex_

  // Guarded by stats_lock_ (the innermost lock), on lines of their own. Folds (by readers too)
  // apply the journals' records to them.
  alignas(64) mutable detail::SpinLock stats_lock_;
  mutable MemoryStats stats_;
  mutable detail::PeakWindows windows_;
  mutable struct Totals {  // lifetime totals: never reset
    std::uint64_t allocations = 0, frees = 0, allocated_bytes = 0, freed_bytes = 0;
  } totals_;
};

GPUMEMPROF_NAMESPACE_END

#include "gpumemprof/allocator/caching_allocator-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_hot-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_segments-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_stats-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_views-inl.hpp"
