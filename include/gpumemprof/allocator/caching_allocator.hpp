// Layer 2: the caching device allocator, with PyTorch's default policy (docs/pytorch-compat.md).
//
// Map (read this first; validate() checks every invariant marked [v]).
//
// Policy. A request is rounded (size_policy.hpp) and served from one of two pools -- small
// (<= 1 MiB, 2 MiB segments) and large -- by best fit among the free blocks of the *same
// stream*, ordered by (size, address). A larger block is split; a freed block merges with its
// free neighbours. When nothing fits, a new segment comes from the device; when the device is
// full, the OOM sequence frees cached memory and retries once before OutOfMemoryError. A block
// used on other streams (record_stream) is reused only once events recorded on those streams
// at free time complete. With expandable_segments:True each (pool, stream) reserves one address
// range and maps pages (20 MiB large, 2 MiB small) as it fills, as PyTorch does; reserved bytes
// are mapped bytes. compacting_expandable_segments:True (gpumemprof-only) maps 2 MiB pages and
// moves free pages where they are needed, until the workload repeats: then growth maps fresh
// pages and small requests take free large blocks first (expandable_planner.hpp says how pages
// are chosen, expandable_state.hpp when they stop moving; the executor, expandable_executor.hpp,
// carries the plans out).
//
// Private pools (private_pools.hpp, caching_allocator_pools-inl.hpp): a CUDA graph's or a
// MemPool's segments, used only by allocations routed to them (begin/end_allocate_to_pool). Their
// free blocks sit in shards of their own (stream, pool); while a route is active every allocation
// takes the slow path, and during capture nothing forbidden is called (that file says how).
//
// Data: the facade below owns the parts, each a type with its own fields and invariant.
//   Segment  one device allocation (or one expandable reservation); all segments form one list
//            in creation order (segment_list_: segment_list.hpp).
//   Block    a piece of a segment: allocated (in the pointer map), pending free (waiting for
//            events, in no index) or free (in its shard's tree); block.hpp. Its links are
//            private: SegmentChain (segment_chain.hpp) is their only writer.
//   Shard    one stream's free trees (small, large) and block records, behind the stream's spin
//            lock; it is also the stream's lane in the stats ledger. Found without a lock
//            (shards_: shard_registry.hpp, which also holds the two pools' views).
//   ptrs_    allocated blocks by address: 1024 buckets, each with a spin lock.
//   cross_stream_  frees waiting for other streams' events, or for a capture to end
//            (cross_stream_events.hpp).
//   ledger_  the statistics, peak windows and lifetime totals (stats_ledger.hpp).
//   pools_   private pools and their routes (private_pools.hpp).
//   executor_  expandable segments: carries out the planner's plans (maps, unmaps, reservations)
//            and keeps their pages and view (expandable_executor.hpp); the facade lends it the
//            parts its steps change (segment list, records, pools, reserved bytes, stats, events).
//
// Invariants.
//   Blocks  [v] a segment's blocks tile it exactly, linked by prev/next in address order, head
//           first -- links that only SegmentChain (segment_chain.hpp) changes, checking them as
//           it goes; every block shares its segment's stream and pool; no two free neighbours
//           (an expandable segment: no two unmapped neighbours; holes are page-aligned, free
//           and in no tree). Segments never merge.
//   Pools   [v] a free block is in exactly the tree of its (stream, pool); an allocated one is
//           in the pointer map under its address; a pending one has event_count > 0 and sits
//           in the event queues of the streams that used it.
//   Stats   [v] every current value equals its recount from the blocks (allocated = block
//           bytes, requested = requested bytes, reserved = segment bytes); every value and peak
//           read is that of one serial order of the operations consistent with real time
//           (stats_ledger.hpp says how, for any number of streams).
//   Memory  nothing is lost: an operation first does what may throw (a record, room in a tree,
//           the pointer map or the journal, a cross-stream event), then changes state without
//           throwing (tests/allocator/test_exception_safety.cpp fails each heap allocation).
//
// Events (event_buffer.hpp): a call asks the sinks to prepare (a stack walk) before any lock,
// buffers events in its shard's lane (slow paths: the slow lane) through delivery_.notify(),
// delivers after every lock (event_delivery.hpp: the delivery lock, the sinks, the slow lane).
//
// Locks, in the order they are taken. The order of 0, 1, 2 and 5 is declared on the members
// (ACQUIRED_BEFORE) and checked, with what each lock guards, by clang's thread-safety analysis in
// every clang build (meson.build); shards and buckets are sets known at run time, which
// ExclusiveLock (caching_allocator_lock.hpp) and StatsLedger::lock_all take. One exception: a reader
// holding every shard (with_lock) takes the fold lock -- safe while the ledger is quiescent
// (StatsLedger::unlock_all says why).
//   0. delivery lock     one delivery of events to the sinks at a time; sinks run holding only it.
//   1. device_mutex_     slow paths and introspection; guards the segment list, events, record
//                        pools, reserved bytes, the memory fraction.
//   2. fold lock         (ledger) one fold at a time; guards the ledger's lane list.
//   3. shards            creation order; a shard guards its trees and records, its blocks'
//                        links, and its stat journal. The hot path takes only its own.
//   4. pointer buckets   one at a time, after the shard (deallocate takes its bucket first,
//                        only tries the shard under it, and lets the bucket go to wait).
//   5. stats lock        (ledger) innermost.
// The hot path (allocate/deallocate of a cached size: caching_allocator_hot-inl.hpp) takes 3
// and 4. Everything else -- new segments, the OOM sequence, cross-stream events, empty_cache,
// expandable growth, introspection -- is exclusive (ExclusiveLock: 1, 2, every shard, 5), and
// only there is the backend called. A new segment's malloc (cudaMalloc: up to milliseconds)
// runs with less held (ExclusiveLock::released_during): by default the device mutex and the
// allocating stream's shard, as in PyTorch; with release_lock_on_cudamalloc:True nothing.
// empty_cache and the OOM sequence free whole segments holding only the device mutex, having
// taken them out of their trees first (PyTorch holds its lock across every cudaFree).
//
// Files. Hot path: caching_allocator_hot-inl.hpp. New segments, release, garbage collection,
// cross-stream events, release_stream: caching_allocator_segments-inl.hpp. Stats readers:
// caching_allocator_stats-inl.hpp. Views, errors and validate(): caching_allocator_views-inl.hpp.
// Delivery of events: event_delivery.hpp; changes of the sink set: caching_allocator_events-inl.hpp.
// with_lock_then and the views it walks: caching_allocator_locked-inl.hpp. Construction, new
// shards: caching_allocator-inl.hpp.
// Expandable segments: expandable_executor.hpp (bodies: expandable_executor-inl.hpp); the
// executor names device_mutex_ and the stats lock as its own (device_lock(), stats_lock()), and
// ExclusiveLock takes both names, so its steps are checked too. Private pools and capture:
// caching_allocator_pools-inl.hpp. The exclusive section's lock: caching_allocator_lock.hpp.
// Snapshots read the allocator from the history layer: snapshot(allocator), in
// history/snapshot_builder.hpp.
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
#include "gpumemprof/allocator/cross_stream_events.hpp"
#include "gpumemprof/allocator/event_buffer.hpp"
#include "gpumemprof/allocator/event_delivery.hpp"
#include "gpumemprof/allocator/event_sinks.hpp"
#include "gpumemprof/allocator/expandable_executor.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/free_index.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/pointer_map.hpp"
#include "gpumemprof/allocator/private_pools.hpp"
#include "gpumemprof/allocator/relaxed_capture.hpp"
#include "gpumemprof/allocator/segment_chain.hpp"
#include "gpumemprof/allocator/segment_list.hpp"
#include "gpumemprof/allocator/shard_registry.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/allocator/stats_ledger.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/locked_shards.hpp"
#include "gpumemprof/detail/spin_lock.hpp"
#include "gpumemprof/detail/thread_annotations.hpp"
#include "gpumemprof/detail/thread_category.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

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

// A slow path: runs exclusively, holding the device mutex and the stats lock (ExclusiveLock).
// The executor of expandable segments names the same two locks (its device_lock(), stats_lock()).
#define GPUMEMPROF_EXCLUSIVE \
  GPUMEMPROF_REQUIRES(device_mutex_, ledger_.stats_lock(), executor_.device_lock(), executor_.stats_lock())

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

  /// Moves the live allocation at `ptr` into memory category `category` (an id of the category
  /// names: history/memory_category.hpp), as if it had been allocated there: its frees carry it
  /// and the event sinks see a TraceAction::category_change. With `only_untagged`, an allocation
  /// that already has a category keeps it. Returns whether the category changed; a pointer that
  /// is not a live allocation of this allocator changes nothing (false).
  bool set_category(void* ptr, std::uint32_t category, bool only_untagged = false);

  /// Waits for outstanding cross-stream events and returns every fully free segment to the device
  /// (private pools' only once released). While a capture is under way it does nothing: waiting
  /// and freeing are what capture forbids (docs/pools-and-graphs.md).
  void empty_cache();

  // --- Private pools (PyTorch's MemPool and graph pools; docs/pools-and-graphs.md) ---
  /// Creates pool `id` with `options`, or adds a user to it (createOrIncrefPool).
  void create_pool(MempoolId id, MemPoolOptions options = {});
  /// Adds a user to pool `id` (created when new) and routes the allocations for which
  /// `filter(stream)` holds (all, without a filter) to it until end_allocate_to_pool(id)
  /// (beginAllocateToPool). The filter runs on the allocating thread, under the allocator's lock.
  void begin_allocate_to_pool(MempoolId id, std::function<bool(Stream)> filter);
  /// Ends the latest route to `id` (endAllocateToPool); its user stays until release_pool(id).
  void end_allocate_to_pool(MempoolId id);
  /// Takes a user from pool `id` (releasePool). With none left, its free segments go back to the
  /// device now (after any capture ends), and each later one as its last block is freed; the pool
  /// is gone once it holds no segment. Throws std::invalid_argument for an unknown pool.
  void release_pool(MempoolId id);
  /// Pool `id`'s memory now, recounted from its segments; nullopt for an unknown pool.
  [[nodiscard]] std::optional<PoolStats> pool_stats(MempoolId id) const;
  /// Every private pool's memory now (creation slots in order).
  [[nodiscard]] std::vector<PoolStats> all_pool_stats() const;

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
  /// Puts `sink` in `slot` in place of the sink there: events before go to the old sink, events
  /// after to the new one, none lost. Throws std::out_of_range for a slot that does not exist.
  void replace_event_sink(std::size_t slot, const AllocatorEventSink& sink);
  /// Number of event sinks attached now.
  [[nodiscard]] std::size_t event_sink_count() const;
  /// Tells the event sinks every event that happened before this call (the allocator tells them
  /// in batches otherwise: event_buffer.hpp). Call it with no allocator lock held (not from a sink).
  void flush_events() const { deliver_events(true); }
  /// Runs `f(const LockedView&)` under the allocator's lock (as with_lock), lets the lock go,
  /// tells the event sinks every event before it, and returns `then(result of f)` before any
  /// later event reaches a sink: a reader that sees the view and the events up to the same
  /// instant (snapshots). `f` must return a value.
  template <class F, class G>
  decltype(auto) with_lock_then(F&& f, G&& then) const;
  /// Called (outside the lock) before OutOfMemoryError is thrown.
  void attach_oom_observer(OomObserver observer);

  /// Every segment with its blocks, in creation order. An expandable segment shows as one
  /// segment per run of mapped pages (as in PyTorch's snapshots), unmapped holes left out.
  [[nodiscard]] std::vector<SegmentView> segments() const;
  /// Visits the segments under the allocator's lock; `f(const SegmentView&)` must not call back.
  template <class F>
  void visit_segments(F&& f) const;

  /// A consistent view of the allocator, valid only inside with_lock(): visit_segments(f) visits
  /// every segment in creation order, stats() the statistics (caching_allocator_locked-inl.hpp).
  class LockedView;
  /// Runs `f(const LockedView&)` under the allocator's lock and returns its result: no allocator
  /// event happens meanwhile. `f` must not call the allocator (it would deadlock).
  template <class F>
  decltype(auto) with_lock(F&& f) const {
    ExclusiveLock lock(*this, typename ExclusiveLock::ReadersOnly{});
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

  using Shard = detail::Shard;
  using Pool = detail::ShardPool;
  using Tree = detail::BlockTree;
  using Records = detail::BlockRecords;

  // The exclusive section's lock (the device mutex, then every lock of the ledger):
  // caching_allocator_lock.hpp.
  class GPUMEMPROF_SCOPED_CAPABILITY ExclusiveLock;

  using PendingEvent = detail::PendingEvent;
  using StreamEvents = detail::StreamEvents;

  // --- hot path helpers ---
  [[nodiscard]] std::size_t round(std::size_t bytes) const noexcept {
    if (GPUMEMPROF_LIKELY(!has_roundup_)) {
      return bytes < kMinBlockSize ? kMinBlockSize : (bytes + kMinBlockSize - 1) & ~(kMinBlockSize - 1);
    }
    return round_size(bytes, cfg_);
  }
  Pool& pool_of(const Block* b) noexcept { return b->small_pool ? small_ : large_; }
  // The stream's shard: a lock-free lookup among the first kFastShards, else under the device mutex.
  Shard& shard_for(Stream s) {
    Shard* sh = find_fast_shard(s);
    return sh != nullptr ? *sh : shard_slow(s);
  }
  Shard* find_fast_shard(Stream s) const noexcept { return shards_.find_fast(s); }
  Shard& shard_slow(Stream s);
  Shard& add_shard(Stream s, bool exclusive, std::uint32_t pool = 0) GPUMEMPROF_REQUIRES(device_mutex_);
  Shard& add_shard_exclusive(Stream s, std::uint32_t pool = 0) GPUMEMPROF_EXCLUSIVE;
  // The pointer-map bucket of an address (bits that PointerMap's own hash does not use).
  static std::size_t bucket_hash(std::uintptr_t addr) noexcept {
    return static_cast<std::size_t>(((addr >> 9) * 0xD6E8FEB86659FD93ull) >> 32);
  }
  auto& bucket_of(std::uintptr_t addr) noexcept { return ptrs_.at(bucket_hash(addr)); }
  // validate() only (every shard held: the map stands still).
  [[nodiscard]] const Block* find_pointer(std::uintptr_t addr) const noexcept GPUMEMPROF_NO_THREAD_SAFETY_ANALYSIS {
    return ptrs_.at(bucket_hash(addr)).value.find(addr);
  }
  // The best fit in `tree` under the policy; it stays in the tree (hand_out takes it out).
  Block* find_free_block(Tree& tree, Pool& pool, std::size_t size);
  // Whether a request of `pool` that its tree cannot serve looks for a free large block first,
  // on the hot path: the compacting policy's small requests (ExpandableExecutor::spill_block, as
  // grow() would next with nothing done before it: no garbage collection to run).
  [[nodiscard]] bool spills_small(const Pool& pool) const noexcept { return compacting_ && pool.small && !gc_active_; }
  // Hands out `block`, a free block in its shard's tree: first everything that may throw (a
  // record for the split, tree and pointer-map room), so that a failure leaves the block where
  // it was; then the changes, which cannot throw. The stat changes are left in `r`, for the
  // ledger (the hot path reserved their room before).
  Block* hand_out(Shard& shard, Pool& pool, Block* block, std::size_t size, std::size_t requested,
                  detail::StatRecord& r);
  // Room in `tree` for `b` merged with its free neighbours, so that free_block(tree, ..., b)
  // cannot throw. May throw std::bad_alloc: call before changing anything.
  static void reserve_free(Tree& tree, const Block* b) {
    std::size_t merged = b->size;
    for (const Block* n : {b->prev(), b->next()}) {
      if (n != nullptr && n->is_free() && n->mapped == b->mapped) merged += n->size;
    }
    tree.reserve(merged);
  }
  // Merges a freed block with free neighbours and files it; the stat changes are returned.
  // `events`: the lane of the caller's lock (the shard's; delivery_.slow_lane() in the slow paths).
  detail::StatRecord free_block(Tree& tree, Records& records, Block* b, bool deferred, detail::EventLane& events);
  // A deferred free (events complete), run exclusively.
  void free_block_exclusive(Block* b) GPUMEMPROF_EXCLUSIVE {
    Pool& pool = pool_of(b);
    ledger_.apply_free(
        free_block(pool.at(b->stream, b->pool), block_records_, b, /*deferred=*/true, delivery_.slow_lane()));
    if (GPUMEMPROF_UNLIKELY(b->pool != 0)) reclaim_released(b);
  }
  // Binds stats_ (at construction, which the analysis does not check: no other thread sees the
  // allocator yet).
  detail::StatsLedger::State& exclusive_state() GPUMEMPROF_REQUIRES(ledger_.stats_lock()) { return ledger_.state(); }
  static AllocatorGauges gauges_of(const detail::StatsLedger::State& s) noexcept;
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
                       ExclusiveLock& lock) GPUMEMPROF_EXCLUSIVE;
  Block* new_segment(Shard& shard, Pool& pool, std::size_t segment_bytes, bool is_retry,
                     ExclusiveLock& lock) GPUMEMPROF_EXCLUSIVE;
  // Expandable segments: executor_ (expandable_executor.hpp) grows and releases them.
  using Executor = detail::ExpandableExecutor<Backend>;
  void rehome_segment(Segment* s, Shard& home) GPUMEMPROF_EXCLUSIVE;
  [[nodiscard]] std::size_t span_of(const Segment& s) const noexcept {
    return s.expandable ? s.reservation.size : s.size;
  }
  template <class F>
  void for_each_view(const Segment& s, F&& f) const;
  void release_segment(Block* whole) GPUMEMPROF_EXCLUSIVE;
  void forget_segment(Block* whole) GPUMEMPROF_EXCLUSIVE;
  bool release_available_cached_blocks(Pool& pool, Stream stream, std::uint32_t private_pool,
                                       std::size_t size) GPUMEMPROF_EXCLUSIVE;
  // --- private pools and capture (caching_allocator_pools-inl.hpp) ---
  // Events waiting (cross-stream frees, queued or deferred), without the routes' share.
  [[nodiscard]] std::size_t events_waiting() const noexcept {
    return pending_events_.load(std::memory_order_relaxed) % kRouteUnit;
  }
  // Whether a capture may be under way that forbids waiting on `s` or calling malloc/free
  // without relaxed mode: a route is active, or the backend says `s` captures.
  bool capturing(Stream s) GPUMEMPROF_EXCLUSIVE;
  bool any_capturing() GPUMEMPROF_EXCLUSIVE;  // routes, or the stream of a segment holding an allocated block
  using RelaxedCapture = detail::RelaxedCapture<Backend>;  // relaxed_capture.hpp
  // The private pool an allocation on `stream` goes to now (0: the default pool).
  std::uint32_t pool_for(Stream stream) GPUMEMPROF_EXCLUSIVE { return pools_.routing() ? pools_.route_for(stream) : 0; }
  // A last resort before OOM: a cached block of a use_on_oom pool.
  Block* borrow_on_oom(Pool& pool, Stream stream, std::size_t size) GPUMEMPROF_EXCLUSIVE;
  // Frees of cross-stream blocks deferred while capture went on get their events (or wait on).
  void flush_deferred() GPUMEMPROF_EXCLUSIVE;
  bool defer_while_capturing(Block* b) GPUMEMPROF_EXCLUSIVE;
  // A block of released pool just freed: its segment goes back once whole, the pool once empty.
  void reclaim_released(Block* b) GPUMEMPROF_EXCLUSIVE;
  void release_unused_pool(std::uint32_t index) GPUMEMPROF_EXCLUSIVE;
  PoolStats pool_stats_locked(std::uint32_t index) const GPUMEMPROF_EXCLUSIVE;
  // With `lock`, cudaFree runs holding only the device mutex (release_cached_segments).
  void release_cached_blocks(ExclusiveLock* lock = nullptr) GPUMEMPROF_EXCLUSIVE;
  void release_cached_segments(Pool& pool, ExclusiveLock* lock) GPUMEMPROF_EXCLUSIVE;
  void garbage_collect_cached_blocks() GPUMEMPROF_EXCLUSIVE;
  void process_events() GPUMEMPROF_EXCLUSIVE;
  void insert_events(Block* b) GPUMEMPROF_EXCLUSIVE;
  void synchronize_and_free_events() GPUMEMPROF_EXCLUSIVE;
  void synchronize_queue(std::deque<PendingEvent>& q) GPUMEMPROF_EXCLUSIVE;
  // Throws InvalidPointerError explaining `ptr` (takes the exclusive lock; call with none held).
  [[noreturn]] GPUMEMPROF_NOINLINE void invalid_pointer(const void* ptr, const char* what) const {
    ExclusiveLock lock(*this);
    throw_invalid_pointer(ptr, what);
  }
  [[noreturn]] void throw_invalid_pointer(const void* ptr, const char* what) const GPUMEMPROF_EXCLUSIVE;
  [[noreturn]] void throw_oom(Pool& pool, Stream stream, std::size_t size, std::size_t requested,
                              ExclusiveLock& lock) GPUMEMPROF_EXCLUSIVE;
  using EventCall = detail::EventCall<CachingAllocator>;  // at the entry of calls that may cause events
  friend EventCall;
  // Delivers buffered events (event_delivery.hpp); unless `wait`, gives up when a lock is busy.
  // No allocator lock held.
  void deliver_events(bool wait) const GPUMEMPROF_EXCLUDES(delivery_.lock(), device_mutex_) {
    delivery_.deliver(wait, device_mutex_, shards_);
  }
  // Changes the sink set between two deliveries: events before go to the old set.
  template <class F>
  decltype(auto) change_sinks(F&& change);
  void validate_locked() const GPUMEMPROF_EXCLUSIVE;
  static BlockView view_of(const Block& b);

  Backend backend_;
  AllocatorConfig cfg_;
  bool has_roundup_ = false;  // any roundup_power2_divisions > 1 configured
  bool gc_active_ = false;    // memory fraction and garbage_collection_threshold both set (written exclusively)
  bool expandable_ = false;   // expandable segments (either policy) on a backend with virtual memory
  bool compacting_ = false;   // the compacting policy (compacting_expandable_segments:True)

  // Guarded by device_mutex_ (and so by ExclusiveLock): the shard list, segments, events, the
  // slow paths' record pools, reserved bytes, the memory fraction, OOM observers. The sinks'
  // active() and gc_active_ change only exclusively, so any shard lock suffices to read them.
  // The lock order of the map above, declared (clang checks it with -Wthread-safety-beta): the
  // delivery lock, the device mutex, then the ledger's (fold lock, shards, stats lock).
  // The delivery of events: its lock (0. above), the sinks, the slow paths' lane
  // (event_delivery.hpp). Sinks are added and removed under its lock (change_sinks).
  detail::EventDelivery delivery_;
  mutable detail::Mutex device_mutex_ GPUMEMPROF_ACQUIRED_AFTER(delivery_.lock())
      GPUMEMPROF_ACQUIRED_BEFORE(ledger_.stats_lock());  // after the delivery lock, before the ledger's
  // The shards (shard_registry.hpp): the list changes under device_mutex_; the first ones are
  // found without a lock (find_fast), which the analysis cannot see: the registry carries no
  // GUARDED_BY, and the writers below hold the device mutex.
  detail::ShardRegistry shards_;
  Pool small_;
  Pool large_;
  // Allocated blocks by address. 1024 buckets (64 KiB; each map's slots come with its first
  // block). Two threads whose blocks share a bucket share a lock and a line that bounce between
  // cores on every allocate and free: for 8 threads with 2 live blocks each, about one run in 9
  // has such a pair (with 256 buckets, one in 3).
  detail::LockedShards<detail::PointerMap<Block>, 1024> ptrs_;
  Records block_records_ GPUMEMPROF_GUARDED_BY(device_mutex_);
  detail::SegmentList segment_list_ GPUMEMPROF_GUARDED_BY(device_mutex_);        // all segments, creation order
  detail::CrossStreamEvents cross_stream_ GPUMEMPROF_GUARDED_BY(device_mutex_);  // cross_stream_events.hpp
  // Written exclusively; read by the hot path, which takes the slow path unless it is 0: the
  // events waiting (queued and deferred), plus kRouteUnit per active route to a private pool --
  // so routing costs the hot path nothing (PyTorch takes its one lock for every malloc).
  std::atomic<std::size_t> pending_events_{0};
  static constexpr std::size_t kRouteUnit = std::size_t{1} << 40;
  detail::PrivatePools pools_ GPUMEMPROF_GUARDED_BY(device_mutex_);
  std::size_t total_reserved_ GPUMEMPROF_GUARDED_BY(device_mutex_) = 0;  // bytes held from the device
  std::size_t reserving_ GPUMEMPROF_GUARDED_BY(device_mutex_) = 0;       // bytes of new segments in backend mallocs now
  std::optional<std::size_t> allowed_max_ GPUMEMPROF_GUARDED_BY(device_mutex_);  // set_memory_fraction
  std::vector<OomObserver> oom_observers_ GPUMEMPROF_GUARDED_BY(device_mutex_);

  // The statistics, their locks and the protocol of their writers and readers (stats_ledger.hpp).
  mutable detail::StatsLedger ledger_{cfg_.max_split_size, cfg_.max_split_size_stat()};
  // The stats as the slow paths read and write them, exclusively (ExclusiveLock holds the stats lock).
  MemoryStats& stats_ GPUMEMPROF_GUARDED_BY(ledger_.stats_lock()) = exclusive_state().stats;
  // Expandable segments: the executor of the planner's plans and what it keeps between growths
  // (expandable_executor.hpp), lent the parts its steps change. Its locks are device_mutex_ and
  // the stats lock under its own names; ExclusiveLock takes both names.
  Executor executor_{device_mutex_, ledger_.stats_lock(),
                     typename Executor::Parts{backend_, cfg_, segment_list_, block_records_, small_, large_,
                                              total_reserved_, allowed_max_, stats_, delivery_}};
};

#undef GPUMEMPROF_EXCLUSIVE

GPUMEMPROF_NAMESPACE_END

// GPUMEMPROF_COMPILED_LIB (set by the gpumemprof-compiled pkg-config file and meson dependency):
// the member bodies come from the compiled library (CachingAllocator<AnyBackend>, declared
// `extern template` in default_allocator.hpp); only the hot path (inlined) and the member
// templates that callers instantiate stay.
#include "gpumemprof/allocator/caching_allocator_lock.hpp"
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/caching_allocator-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_pools-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_segments-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_stats-inl.hpp"
#endif
#include "gpumemprof/allocator/caching_allocator_hot-inl.hpp"
#ifndef GPUMEMPROF_COMPILED_LIB  // after the hot path: clang -Wthread-safety flags deliver_events otherwise
#include "gpumemprof/allocator/caching_allocator_events-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_views-inl.hpp"
#endif
#include "gpumemprof/allocator/caching_allocator_locked-inl.hpp"
