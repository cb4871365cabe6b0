// Analysis layer (above history, below the profiler): what-if replay of a snapshot's history.
// The device_traces of a snapshot (PyTorch's or ours) hold every request the program made --
// alloc, free_requested, free_completed, with sizes and streams -- so replaying them through our
// allocator on a simulated device answers "what would this run have reserved under another
// PYTORCH_CUDA_ALLOC_CONF?". On the default policy it reproduces PyTorch's reserved bytes.
//
// Which event frees: free_completed. PyTorch records free_requested when the program drops the
// block; a block with pending cross-stream uses (record_stream) stays unusable until its events
// complete, and only then does free_completed mark it reusable. Without pending uses the two
// events follow each other. Deallocating at free_completed therefore reproduces the moment the
// block became reusable, without modelling the events; a block whose free_completed is not in
// the trace is still active_pending_free at its end, and stays allocated here too.
//
// Segment events (segment_alloc/free/map/unmap) are outcomes, not requests: they give the
// *recorded* reserved bytes to compare with. The one request they reveal is empty_cache(): a run
// of segment_free/segment_unmap events not followed by an `oom` is replayed as one
// empty_cache() call (PyTorch also frees cached segments on the OOM path, which our allocator
// redoes on its own, and under garbage_collection_threshold, in which case no call is inferred).
//
// Device capacity: --capacity when given, else inferred from the first recorded `oom` (the
// recorded reserved bytes at that moment plus the device's free bytes it reports), else 80 GiB.
// At a recorded `oom` the replay asks for the same (rounded) bytes: if they fit, that OOM is
// avoided (the bytes are given back at once, as the real program never got them).
//
// Private pools (CUDA graphs, MemPool): a recorded segment belongs to the pool the end state
// (`segments`, segment_pool_id) gives the segment at its address, when the trace does not free
// it afterwards; a segment freed before the end belongs to the default pool. Each alloc goes to the
// pool of the recorded segment that holds its address; every private pool is kept alive for the
// whole replay (a graph holds its memory), so replay and tune keep each pool apart, as PyTorch did.
// Peak reserved bytes are reported per pool, recorded and replayed.
//
// Truncated history: a history ring keeps only the newest events, so a trace may start mid-run.
// Then the end state (`segments`) and the trace, walked backwards, tell what existed at the
// start: segments that no segment_alloc in the trace created, blocks the trace frees without
// having allocated them, and active blocks of the end state that the trace never allocated.
// The replay is seeded with those segments and blocks first (same sizes, same order in each
// segment; freed blocks' sizes are estimated from their requested bytes), and says so. Seeding
// under --config expandable_segments:True works the same way (the seeded blocks are cut from the
// stream's expandable segment). Memory that lay in *recorded* expandable segments before the
// trace began cannot be seeded -- such a segment grows and shrinks page by page, and the end
// state does not say which pages were mapped when -- so that case is refused with a FormatError
// saying what to record instead; a complete trace of expandable segments replays as usual.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/recorded_blocks.hpp"  // snapshot_peak_allocated, beside the replay
#include "gpumemprof/analysis/trace_start.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct SnapshotReplayOptions {
  AllocatorConfig config;    ///< the policy to try (default: PyTorch's defaults)
  std::size_t capacity = 0;  ///< device bytes; 0 = inferred (see the file comment)
};

/// One pool's peak reserved bytes, recorded and replayed.
struct PoolReplay {
  MempoolId id;
  std::uint64_t recorded_peak_reserved = 0;
  std::int64_t peak_reserved = 0;
};

struct SnapshotReplayResult {
  int device = 0;
  std::size_t events = 0;
  std::size_t allocs = 0;
  std::size_t frees = 0;  ///< free_completed events replayed
  std::size_t free_requested = 0;
  std::uint64_t capacity = 0;
  bool capacity_inferred = false;  ///< from a recorded oom
  // What the snapshot recorded.
  std::uint64_t recorded_peak_reserved = 0;  ///< from the segment events, starting at the seed
  std::size_t recorded_segment_allocs = 0;
  std::size_t recorded_ooms = 0;
  std::uint64_t peak_requested_bytes = 0;  ///< most requested bytes live at once
  // What the replay did.
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::int64_t num_device_alloc = 0;
  std::size_t empty_cache_calls = 0;    ///< inferred from runs of segment_free
  std::size_t ooms_reproduced = 0;      ///< recorded ooms that happened again
  std::size_t ooms_avoided = 0;         ///< recorded ooms whose request fit this time
  std::size_t new_ooms = 0;             ///< allocations the recorded run made that failed here
  std::size_t first_new_oom_event = 0;  ///< index in the trace (when new_ooms != 0)
  std::size_t unknown_frees = 0;        ///< frees of addresses nothing allocated (ignored)
  ReplaySeed seed;
  std::vector<PoolReplay> pools;  ///< private pools (none when the snapshot has only the default pool)
  [[nodiscard]] bool oom() const noexcept { return ooms_reproduced + new_ooms != 0; }
};

namespace detail {

inline bool is_segment_release(TraceAction a) noexcept {
  return a == TraceAction::segment_free || a == TraceAction::segment_unmap;
}

/// One piece of a seeded segment, in address order: a live block or a filler freed after seeding.
struct SeedPiece {
  std::uint64_t address = 0;  // the recorded address (fillers: unused)
  std::uint64_t size = 0;
  bool live = false;
};

/// Tiles `s` with its live blocks and fillers that our allocator will cut in address order:
/// sizes clipped to the next block; in a large segment no piece of 1 MiB or less (PyTorch never
/// splits one off, so such a gap belongs to its neighbour); in a small one no piece over 1 MiB.
inline std::vector<SeedPiece> seed_pieces(const SeedSegment& s) {
  std::vector<SeedPiece> pieces;
  std::uint64_t at = s.address;
  const std::uint64_t end = s.address + s.total_size;
  auto filler = [&](std::uint64_t bytes) {
    if (!s.is_large) {
      while (bytes > kSmallSize) {
        pieces.push_back({0, kSmallSize, false});
        bytes -= kSmallSize;
      }
    }
    if (bytes != 0) pieces.push_back({0, bytes, false});
  };
  for (auto it = s.blocks.begin(); it != s.blocks.end(); ++it) {
    const std::uint64_t addr = std::max(it->first, at);
    const auto next = std::next(it);
    const std::uint64_t limit = next == s.blocks.end() ? end : std::min(end, next->first);
    if (addr >= limit) continue;  // overlapped by an earlier (estimated) block
    const std::uint64_t block = std::min(it->second, limit - addr);
    std::uint64_t size = block;
    std::uint64_t gap = addr - at;
    if (s.is_large && gap != 0 && gap <= kSmallSize) {  // too small to stand alone: joins this block
      size += gap;
      gap = 0;
    }
    filler(gap);
    pieces.push_back({it->first, size, true});
    at = addr + block;
  }
  std::uint64_t tail = end - std::min(end, at);
  if (s.is_large && tail != 0 && tail <= kSmallSize && !pieces.empty()) {
    pieces.back().size += tail;  // PyTorch would not have split it off either
    tail = 0;
  }
  filler(tail);
  return pieces;
}

/// Replays one device's trace; see replay_snapshot().
template <SnapshotLike S>
class SnapshotReplayer {
 public:
  using Alloc = CachingAllocator<SimulatedBackend>;

  SnapshotReplayer(const S& snap, int device, const SnapshotReplayOptions& opt)
      : snap_(snap), trace_(snap.device_traces.at(static_cast<std::size_t>(device))) {
    r_.device = device;
    r_.events = trace_.size();
    const std::vector<SeedSegment> start = reconstruct_start(snap, device, r_.seed);
    assign_pools(device);
    scan_recorded();
    if (opt.capacity != 0) {
      r_.capacity = opt.capacity;
      r_.capacity_inferred = false;
    }
    const std::size_t capacity = r_.capacity != 0 ? r_.capacity : std::size_t{80} << 30;
    r_.capacity = capacity;
    SimulatedOptions device_options{capacity, device, kRoundLarge, true};
    device_options.placement = recorded_placement(start);
    alloc_ = std::make_unique<Alloc>(SimulatedBackend(std::move(device_options)), opt.config);
    for (const SeedSegment& s : start) seed_segment(s);
    for (void* p : fillers_) alloc_->deallocate(p);
    fillers_.clear();
    r_.peak_requested_bytes = requested_live_;
    alloc_->reset_peak_memory_stats();
    alloc_->reset_accumulated_memory_stats();
    gc_recorded_ = recorded_gc();
    for (PoolReplay& p : r_.pools) alloc_->create_pool(p.id);  // alive for the whole replay
  }

  SnapshotReplayResult run() {
    for (std::size_t k = 0; k < trace_.size(); ++k) {
      step(k);
      if (!r_.pools.empty() && trace_[k].action == TraceAction::alloc) note_pool_peaks();
    }
    const MemoryStats st = alloc_->memory_stats();
    r_.peak_allocated = st.allocated_bytes.all().peak;
    r_.peak_reserved = st.reserved_bytes.all().peak;
    r_.num_device_alloc = st.num_device_alloc;
    alloc_->validate();
    return r_;
  }

 private:
  // Which pool each recorded segment belongs to (see the file comment): the end state's pool for
  // segments that live to the end, the default pool for the others.
  void assign_pools(int device) {
    std::map<std::uint64_t, MempoolId> at_end;  // segment address -> its pool
    for (const auto& seg : snap_.segments) {
      if (seg.device == device && !seg.pool_id.is_default()) at_end[seg.address] = seg.pool_id;
    }
    if (at_end.empty()) return;
    std::unordered_map<std::uint64_t, std::size_t> last_alloc;  // address -> last segment_alloc
    for (std::size_t k = 0; k < trace_.size(); ++k) {
      if (trace_[k].action == TraceAction::segment_alloc) last_alloc[trace_[k].addr] = k;
    }
    segment_pool_.assign(trace_.size(), MempoolId{});
    for (const auto& [addr, k] : last_alloc) {
      if (auto it = at_end.find(addr); it != at_end.end()) segment_pool_[k] = it->second;
    }
    for (const auto& seg : snap_.segments) {  // segments from before the trace began
      if (seg.device == device && last_alloc.count(seg.address) == 0 && !seg.pool_id.is_default()) {
        live_segments_[seg.address] = {seg.address + seg.total_size, seg.pool_id};
      }
    }
    for (const auto& [addr, id] : at_end) {
      if (std::none_of(r_.pools.begin(), r_.pools.end(), [id = id](const PoolReplay& p) { return p.id == id; })) {
        r_.pools.push_back(PoolReplay{id});
      }
    }
  }
  PoolReplay& pool_replay(MempoolId id) {
    return *std::find_if(r_.pools.begin(), r_.pools.end(), [id](const PoolReplay& p) { return p.id == id; });
  }
  // The pool of the recorded segment holding `addr` now.
  MempoolId pool_at(std::uint64_t addr) const {
    auto it = live_segments_.upper_bound(addr);
    if (it == live_segments_.begin()) return {};
    --it;
    return addr < it->second.first ? it->second.second : MempoolId{};
  }
  void note_pool_peaks() {
    for (PoolReplay& p : r_.pools) {
      if (const auto st = alloc_->pool_stats(p.id)) p.peak_reserved = std::max(p.peak_reserved, st->reserved_bytes);
    }
  }

  // The recorded side: reserved bytes over the segment events, the capacity an oom implies.
  void scan_recorded() {
    std::uint64_t reserved = r_.seed.reserved_bytes;
    r_.recorded_peak_reserved = reserved;
    std::map<std::uint64_t, std::pair<std::uint64_t, MempoolId>> pool_segments;  // private pools' live segments
    std::vector<std::uint64_t> pool_reserved(r_.pools.size(), 0);
    auto pool_index = [this](MempoolId id) { return static_cast<std::size_t>(&pool_replay(id) - r_.pools.data()); };
    for (const auto& [addr, seg] : live_segments_) {
      pool_reserved[pool_index(seg.second)] += seg.first - addr;
    }
    for (std::size_t k = 0; k < trace_.size(); ++k) {
      const auto& e = trace_[k];
      if (!segment_pool_.empty() && e.action == TraceAction::segment_alloc && !segment_pool_[k].is_default()) {
        pool_segments[e.addr] = {e.size, segment_pool_[k]};
        pool_reserved[pool_index(segment_pool_[k])] += e.size;
      } else if (e.action == TraceAction::segment_free) {
        if (auto it = pool_segments.find(e.addr); it != pool_segments.end()) {
          pool_reserved[pool_index(it->second.second)] -= it->second.first;
          pool_segments.erase(it);
        }
      }
      for (std::size_t i = 0; i < r_.pools.size(); ++i) {
        r_.pools[i].recorded_peak_reserved = std::max(r_.pools[i].recorded_peak_reserved, pool_reserved[i]);
      }
      switch (e.action) {
        case TraceAction::segment_alloc: ++r_.recorded_segment_allocs; [[fallthrough]];
        case TraceAction::segment_map: reserved += e.size; break;
        case TraceAction::segment_free:
        case TraceAction::segment_unmap: reserved -= std::min(reserved, e.size); break;
        case TraceAction::oom:
          if (r_.recorded_ooms++ == 0) {
            r_.capacity = reserved + e.addr;
            r_.capacity_inferred = true;
          }
          break;
        default: break;
      }
      r_.recorded_peak_reserved = std::max(r_.recorded_peak_reserved, reserved);
    }
  }

  bool recorded_gc() const {
    for (const auto& [k, v] : snap_.allocator_settings) {
      if (k == "garbage_collection_threshold" && std::holds_alternative<double>(v)) return std::get<double>(v) > 0.0;
    }
    return false;
  }

  // Where the recording's cudaMallocs landed, in call order: the seeded segments, then the
  // trace's segment_alloc events. The simulated device puts each malloc there when it asks for
  // the recorded size (SimulatedOptions::placement), so that ties between equal-size free blocks
  // break by address as they did when recorded (graphs_capture: the recorded peak, not 2 MiB
  // less); a malloc the recording did not make goes to the lowest free range.
  std::vector<std::pair<std::uintptr_t, std::size_t>> recorded_placement(const std::vector<SeedSegment>& start) const {
    std::vector<std::pair<std::uintptr_t, std::size_t>> out;
    for (const SeedSegment& s : start) {
      if (s.total_size != 0) out.emplace_back(static_cast<std::uintptr_t>(s.address), s.total_size);
    }
    for (const auto& e : trace_) {
      if (e.action == TraceAction::segment_alloc) out.emplace_back(static_cast<std::uintptr_t>(e.addr), e.size);
    }
    return out;
  }

  void seed_segment(const SeedSegment& s) {
    const Stream stream(static_cast<std::uintptr_t>(s.stream));
    const std::int64_t before = alloc_->memory_stats().reserved_bytes.all().current;
    if (s.total_size == 0) {  // an orphan block: no known segment
      for (const auto& [addr, size] : s.blocks) adopt(addr, alloc_->allocate(size, stream), s.requested.at(addr));
      r_.seed.exact_layout = false;
      return;
    }
    if (s.is_large) {  // one allocation of the whole segment creates it at its recorded size
      void* whole = alloc_->allocate(s.total_size, stream);
      alloc_->deallocate(whole);
    }
    for (const SeedPiece& p : seed_pieces(s)) {
      void* ptr = alloc_->allocate(p.size, stream);
      if (p.live) {
        adopt(p.address, ptr, s.requested.at(p.address));
      } else {
        fillers_.push_back(ptr);
      }
    }
    const std::int64_t grown = alloc_->memory_stats().reserved_bytes.all().current - before;
    if (grown != static_cast<std::int64_t>(s.total_size)) r_.seed.exact_layout = false;
  }

  void adopt(std::uint64_t addr, void* ptr, std::uint64_t requested) {
    ptrs_[addr] = Live{ptr, requested};
    requested_live_ += requested;
  }

  void step(std::size_t k) {
    const auto& e = trace_[k];
    switch (e.action) {
      case TraceAction::alloc: {
        ++r_.allocs;
        if (ptrs_.count(e.addr) != 0) {
          throw FormatError("device_traces[" + std::to_string(r_.device) + "][" + std::to_string(k) +
                            "]: alloc at an address that is still allocated (a free event is missing)");
        }
        try {
          const MempoolId pool = live_segments_.empty() ? MempoolId{} : pool_at(e.addr);
          ptrs_[e.addr] = Live{allocate_in(pool, e.size, Stream(static_cast<std::uintptr_t>(e.stream))), e.size};
          requested_live_ += e.size;
          r_.peak_requested_bytes = std::max(r_.peak_requested_bytes, requested_live_);
        } catch (const OutOfMemoryError&) {
          if (r_.new_ooms++ == 0) r_.first_new_oom_event = k;
          failed_.insert(e.addr);
        }
        return;
      }
      case TraceAction::free_requested: ++r_.free_requested; return;
      case TraceAction::free_completed: {
        if (auto it = ptrs_.find(e.addr); it != ptrs_.end()) {
          ++r_.frees;
          alloc_->deallocate(it->second.ptr);
          requested_live_ -= std::min(requested_live_, it->second.requested);
          ptrs_.erase(it);
        } else if (failed_.erase(e.addr) == 0) {
          ++r_.unknown_frees;
        }
        return;
      }
      case TraceAction::segment_alloc:
        if (!segment_pool_.empty() && !segment_pool_[k].is_default()) {
          live_segments_[e.addr] = {e.addr + e.size, segment_pool_[k]};
        }
        return;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap: {
        if (e.action == TraceAction::segment_free) live_segments_.erase(e.addr);
        if (gc_recorded_ || (k > 0 && is_segment_release(trace_[k - 1].action))) return;
        std::size_t j = k;
        while (j < trace_.size() && is_segment_release(trace_[j].action)) ++j;
        if (j < trace_.size() && trace_[j].action == TraceAction::oom) return;  // the OOM path, redone by us
        alloc_->empty_cache();
        ++r_.empty_cache_calls;
        return;
      }
      case TraceAction::oom: {
        try {
          void* probe = alloc_->allocate(e.size, Stream(static_cast<std::uintptr_t>(e.stream)));
          alloc_->deallocate(probe);
          ++r_.ooms_avoided;
        } catch (const OutOfMemoryError&) {
          ++r_.ooms_reproduced;
        }
        return;
      }
      default: return;
    }
  }

  // An allocation of `bytes` on `stream`, in private pool `pool` unless it is the default.
  void* allocate_in(MempoolId pool, std::size_t bytes, Stream stream) {
    if (pool.is_default()) return alloc_->allocate(bytes, stream);
    alloc_->begin_allocate_to_pool(pool, nullptr);
    struct End {
      Alloc& a;
      MempoolId id;
      ~End() {
        a.end_allocate_to_pool(id);
        a.release_pool(id);
      }
    } end{*alloc_, pool};
    return alloc_->allocate(bytes, stream);
  }

  struct Live {
    void* ptr = nullptr;
    std::uint64_t requested = 0;
  };
  std::vector<MempoolId> segment_pool_;  // per trace event: a segment_alloc's pool
  std::map<std::uint64_t, std::pair<std::uint64_t, MempoolId>>
      live_segments_;  // private pools' recorded segments: end, pool
  const S& snap_;
  const std::remove_cvref_t<decltype(std::declval<const S&>().device_traces[0])>& trace_;
  SnapshotReplayResult r_;
  std::unique_ptr<Alloc> alloc_;
  std::unordered_map<std::uint64_t, Live> ptrs_;
  std::unordered_set<std::uint64_t> failed_;
  std::vector<void*> fillers_;
  std::uint64_t requested_live_ = 0;
  bool gc_recorded_ = false;
};

}  // namespace detail

/// Devices whose trace has events, in index order.
template <SnapshotLike S>
[[nodiscard]] std::vector<int> traced_devices(const S& snap) {
  std::vector<int> out;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (!snap.device_traces[d].empty()) out.push_back(static_cast<int>(d));
  }
  return out;
}

/// Replays device `device`'s trace of `snap` through a CachingAllocator on a simulated device
/// configured by `opt`. Throws ConfigError when the allocator rejects the config, FormatError
/// when the trace contradicts itself, std::out_of_range when the snapshot has no such trace.
template <SnapshotLike S>
[[nodiscard]] SnapshotReplayResult replay_snapshot(const S& snap, int device, const SnapshotReplayOptions& opt = {}) {
  if (device < 0 || static_cast<std::size_t>(device) >= snap.device_traces.size()) {
    throw std::out_of_range("the snapshot has no trace for device " + std::to_string(device));
  }
  return detail::SnapshotReplayer<S>(snap, device, opt).run();
}

GPUMEMPROF_NAMESPACE_END
