// Frames for the snapshot of a replayed trace: each replayed allocation and free names where it
// came from -- filename = the trace file, line = the op's line in it, name = "replay alloc" or
// "replay free" -- so a viewer shows the trace line for every block instead of "no frames".
//
// The ops keep only their line number (trace.hpp); the frames are built here, once the replay
// is done, just before the snapshot is written: one small stack per op, shared by the op's
// entries (a free's free_requested and free_completed) and by the block it left live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/history/snapshot.hpp"
#include "trace.hpp"

namespace gpumemprof::tools {

/// The one-frame stack of op `op` of trace `t`.
[[nodiscard]] inline Frames trace_frame(const Trace& t, const TraceOp& op) {
  return std::make_shared<const std::vector<Frame>>(std::vector<Frame>{
      Frame{t.path, static_cast<std::int64_t>(op.line), op.is_alloc ? "replay alloc" : "replay free"}});
}

/// Gives the alloc/free entries of `snap`'s trace for `device`, and the live blocks, the frames of
/// the ops of `t` that made them. The entries are the ops in order (alloc: one entry; free:
/// free_requested then free_completed), so they are matched from the end: a history ring that
/// dropped the oldest entries loses only their frames. Returns the entries given frames; it stops
/// at the first entry that does not match its op (size or kind), leaving older ones without.
inline std::size_t add_trace_frames(Snapshot& snap, const Trace& t, int device) {
  if (device < 0 || static_cast<std::size_t>(device) >= snap.device_traces.size()) return 0;
  std::vector<TraceEntry>& trace = snap.device_traces[static_cast<std::size_t>(device)];
  std::unordered_map<std::uint64_t, Frames> live;  // address of a live block -> its alloc's frames
  for (const SnapshotSegment& seg : snap.segments) {
    for (const SnapshotBlock& b : seg.blocks) {
      if (seg.device == device && b.state == BlockState::active_allocated) live.emplace(b.address, nullptr);
    }
  }
  std::size_t op = t.ops.size();  // ops[op - 1] is the newest op not matched yet
  std::size_t named = 0;
  Frames free_frames;  // the free whose free_completed was just matched (walking backwards)
  for (std::size_t i = trace.size(); i-- > 0;) {
    TraceEntry& e = trace[i];
    if (e.action == TraceAction::free_requested && free_frames != nullptr) {
      e.frames = std::exchange(free_frames, nullptr);
      ++named;
      continue;
    }
    if (e.action != TraceAction::alloc && e.action != TraceAction::free_completed) continue;
    if (op == 0) break;
    const TraceOp& o = t.ops[op - 1];
    const bool is_alloc = e.action == TraceAction::alloc;
    if (o.is_alloc != is_alloc || (is_alloc && e.size != o.bytes)) break;
    --op;
    e.frames = trace_frame(t, o);
    ++named;
    if (is_alloc) {
      if (auto it = live.find(e.addr); it != live.end() && it->second == nullptr) it->second = e.frames;
    } else {
      free_frames = e.frames;
    }
  }
  for (SnapshotSegment& seg : snap.segments) {
    for (SnapshotBlock& b : seg.blocks) {
      if (seg.device != device || b.state != BlockState::active_allocated) continue;
      if (auto it = live.find(b.address); it != live.end() && it->second != nullptr) b.frames = it->second;
    }
  }
  return named;
}

}  // namespace gpumemprof::tools
