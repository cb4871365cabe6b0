// Layer 3: the value types of a memory snapshot, with PyTorch's schema
// (torch.cuda.memory._snapshot()): segments with their blocks, one trace per device,
// the allocator settings and the external annotations. Exporters (pickle, JSON, HTML)
// and readers work on these types only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One stack frame, as PyTorch writes it.
struct Frame {
  std::string filename;
  std::int64_t line = 0;
  std::string name;
  friend bool operator==(const Frame&, const Frame&) = default;
};

/// How every report names a frame: "function at file:line", or "function in binary" for a frame
/// without line tables (line 0: the file is then the binary's name, or "??").
[[nodiscard]] inline std::string frame_label(const Frame& f) {
  return f.line > 0 ? f.name + " at " + f.filename + ":" + std::to_string(f.line) : f.name + " in " + f.filename;
}

/// A stack, innermost frame first. Shared: entries with the same stack point at one list, so
/// exporters write it once (pickle memo). nullptr means "no frames".
using Frames = std::shared_ptr<const std::vector<Frame>>;

/// A block of a segment. Blocks of a segment tile it in address order.
struct SnapshotBlock {
  std::uint64_t address = 0;
  std::uint64_t size = 0;            ///< bytes
  std::uint64_t requested_size = 0;  ///< bytes the client asked for (0 for inactive blocks)
  BlockState state = BlockState::inactive;
  Frames frames;  ///< stack of the allocation that owns the block (when recorded)
  /// The allocation's memory category now (history/memory_category.hpp; "" = unknown). Written
  /// as the block's "category" key only when set: PyTorch's blocks have no such key, and its
  /// viewers read only the keys they know.
  std::string category = {};
};

/// One device allocation (cudaMalloc) held by the allocator.
struct SnapshotSegment {
  int device = 0;
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;      ///< bytes
  std::uint64_t allocated_size = 0;  ///< bytes in active_allocated blocks
  std::uint64_t active_size = 0;     ///< bytes in active_allocated + active_pending_free blocks
  std::uint64_t requested_size = 0;  ///< requested bytes of the active blocks
  std::uint64_t stream = 0;
  bool is_large = true;  ///< segment_type "large" (else "small")
  bool is_expandable = false;
  Frames frames;  ///< stack of the allocation that created the segment (when recorded)
  std::vector<SnapshotBlock> blocks;
  /// segment_pool_id: (0, 0) the default pool, else a private pool's id (last: for positional initialisers)
  MempoolId pool_id = {};
};

/// One event of the allocation history (PyTorch's TraceEntry).
struct TraceEntry {
  TraceAction action = TraceAction::alloc;
  std::uint64_t addr = 0;  ///< for `oom`: the device's free bytes (written as "device_free")
  std::uint64_t size = 0;  ///< requested bytes for alloc/free_*, segment bytes for segment_*
  std::uint64_t stream = 0;
  std::int64_t time_us = 0;  ///< microseconds since the Unix epoch
  std::string compile_context = "N/A";
  std::string user_metadata;
  Frames frames;
};

/// A live allocation moved to another memory category after it was made
/// (CachingAllocator::set_category; gpumemprof_torch.categorize). PyTorch's trace has no action
/// for it, so the changes travel beside device_traces in our top-level key "category_changes"
/// (one list per device, like device_traces), each placed by `trace_index`: the number of the
/// device's trace entries recorded before it. The allocation's entries before the change carry
/// `previous`, those after it `category` (analysis/timeline.hpp applies the changes in order).
struct CategoryChange {
  std::size_t trace_index = 0;  ///< it happened after that many entries of the device's trace
  std::int64_t time_us = 0;     ///< microseconds since the Unix epoch
  std::uint64_t addr = 0;       ///< the allocation's address
  std::uint64_t size = 0;       ///< its requested bytes
  std::string category;         ///< the category it moved to ("" = unknown)
  std::string previous;         ///< the category it left ("" = unknown)
  friend bool operator==(const CategoryChange&, const CategoryChange&) = default;
};

/// An external annotation: a named range begun (START) or ended (END) on a device.
/// Entries and annotations recorded within one microsecond share a time_us: `trace_index`
/// keeps the order the recorder saw (written as the annotation's "trace_index" key, which
/// PyTorch's viewers ignore; PyTorch's own files have none, and their annotations are placed by
/// time).
struct Annotation {
  std::string name;
  bool start = true;  ///< stage "START" (else "END")
  int device = 0;
  std::int64_t time_us = 0;
  /// It happened after that many entries of its device's trace; -1: not known (placed by time).
  std::int64_t trace_index = -1;
};

/// A value of allocator_settings: PyTorch writes ints, floats, bools, strings and one dict
/// (roundup_power2_divisions, string keys to ints).
using SettingValue =
    std::variant<std::int64_t, double, bool, std::string, std::vector<std::pair<std::string, std::int64_t>>>;

/// Which process of a multi-process run (MPI, torch.distributed) wrote a snapshot. Written as
/// top-level keys that PyTorch's viewers ignore (rank, world_size, host, device and the peaks of
/// the allocator's memory_stats) only when `rank` is set.
struct RankInfo {
  std::int64_t rank = -1;  ///< -1: not part of a multi-process run (the keys are not written)
  std::int64_t world_size = 0;
  std::string host;
  std::string device;                      ///< "cuda:1", "sim:0"
  std::int64_t peak_allocated_bytes = -1;  ///< allocated_bytes.all.peak; -1: unknown
  std::int64_t peak_reserved_bytes = -1;   ///< reserved_bytes.all.peak; -1: unknown
  std::int64_t num_ooms = -1;              ///< -1: unknown
  [[nodiscard]] bool known() const noexcept { return rank >= 0; }
};

/// The whole snapshot (torch.cuda.memory._snapshot()).
struct Snapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  ///< index = device, oldest entry first
  /// Per device index, oldest first: category moves of live allocations (CategoryChange).
  std::vector<std::vector<CategoryChange>> category_changes;
  std::vector<std::pair<std::string, SettingValue>> allocator_settings;
  std::vector<Annotation> external_annotations;
  RankInfo rank_info;  ///< set by per-rank dumps (integrations/mpi.hpp, gpumemprof_torch)
  /// The device's memory outside the allocator when the snapshot was taken (our key
  /// "device_memory", which PyTorch's viewers ignore); empty in PyTorch's snapshots.
  std::vector<DeviceMemory> device_memory;
};

/// Device `device`'s category changes in `snap` (a Snapshot or a CompactSnapshot); empty when it
/// has none (or `device` is negative).
template <class S>
[[nodiscard]] const std::vector<CategoryChange>& category_changes_of(const S& snap, std::int64_t device) {
  static const std::vector<CategoryChange> kNone;
  return device >= 0 && static_cast<std::size_t>(device) < snap.category_changes.size()
             ? snap.category_changes[static_cast<std::size_t>(device)]
             : kNone;
}

GPUMEMPROF_NAMESPACE_END
