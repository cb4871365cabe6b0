// Layer 5: a snapshot's memory timeline as Chrome/Perfetto trace-event JSON
// ({"traceEvents": [...]}, open in ui.perfetto.dev or chrome://tracing).
//
// Per device (one process, pid = device index):
//   - counter tracks "requested" (the bytes asked for, PyTorch's requested_bytes; allocated
//     block bytes are not in a trace) and "reserved" (args {"bytes": N}), replayed from the
//     device trace: alloc +size / free_completed -size, segment_alloc|segment_map +size /
//     segment_free|segment_unmap -size. The history may start late (a full ring buffer
//     drops the oldest events), so each counter starts from the level that makes the replay
//     end at what the snapshot's segments hold; events sharing a timestamp give one sample.
//   - the external annotations as B/E slices on thread 1 ("annotations"); an END without an
//     open START is dropped, an END closes the slices opened after its START.
//   - out-of-memory events as instant events on thread 0 ("allocator").
// Timestamps ("ts") are microseconds, as the format requires (the snapshot's time_us).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/export/formats/atomic_file.hpp"
#include "gpumemprof/export/formats/json_writer.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

inline constexpr int kPerfettoAllocatorTid = 0;
inline constexpr int kPerfettoAnnotationTid = 1;

inline void perfetto_metadata(ValueWriter& w, const char* what, int pid, int tid, const std::string& name) {
  w.begin_dict();
  w.field("name", what);
  w.field("ph", "M");
  w.field("pid", pid);
  w.field("tid", tid);
  w.key("args");
  w.begin_dict();
  w.field("name", name);
  w.end_dict();
  w.end_dict();
}

inline void perfetto_counter(ValueWriter& w, const char* name, int pid, std::int64_t ts, std::int64_t bytes) {
  w.begin_dict();
  w.field("name", name);
  w.field("ph", "C");
  w.field("ts", ts);
  w.field("pid", pid);
  w.field("tid", kPerfettoAllocatorTid);
  w.key("args");
  w.begin_dict();
  w.field("bytes", bytes);
  w.end_dict();
  w.end_dict();
}

// The requested/reserved byte deltas of one trace entry.
template <class Entry>
void perfetto_deltas(const Entry& e, std::int64_t& requested, std::int64_t& reserved) noexcept {
  const auto n = static_cast<std::int64_t>(e.size);
  switch (e.action) {
    case TraceAction::alloc: requested += n; break;
    case TraceAction::free_completed: requested -= n; break;
    case TraceAction::segment_alloc:
    case TraceAction::segment_map: reserved += n; break;
    case TraceAction::segment_free:
    case TraceAction::segment_unmap: reserved -= n; break;
    default: break;
  }
}

template <SnapshotLike S>
void perfetto_device(ValueWriter& w, const S& snap, int device) {
  perfetto_metadata(w, "process_name", device, 0, "GPU " + std::to_string(device) + " memory");
  perfetto_metadata(w, "thread_name", device, kPerfettoAllocatorTid, "allocator");
  perfetto_metadata(w, "thread_name", device, kPerfettoAnnotationTid, "annotations");

  static const std::remove_cvref_t<decltype(snap.device_traces[0])> kNoTrace;
  const auto& trace = device >= 0 && static_cast<std::size_t>(device) < snap.device_traces.size()
                          ? snap.device_traces[static_cast<std::size_t>(device)]
                          : kNoTrace;
  if (!trace.empty()) {
    // Levels at the end: what the snapshot's segments hold (a block pending free still counts
    // as requested until free_completed). Minus the trace's net change = levels at its start.
    std::int64_t end_requested = 0;
    std::int64_t end_reserved = 0;
    for (const SnapshotSegment& seg : snap.segments) {
      if (seg.device != device) continue;
      end_reserved += static_cast<std::int64_t>(seg.total_size);
      for (const SnapshotBlock& b : seg.blocks) {
        if (b.state != BlockState::inactive) end_requested += static_cast<std::int64_t>(b.requested_size);
      }
    }
    std::int64_t net_requested = 0;
    std::int64_t net_reserved = 0;
    for (const auto& e : trace) perfetto_deltas(e, net_requested, net_reserved);
    std::int64_t requested = std::max<std::int64_t>(0, end_requested - net_requested);
    std::int64_t reserved = std::max<std::int64_t>(0, end_reserved - net_reserved);

    std::int64_t ts = trace.front().time_us;
    perfetto_counter(w, "requested", device, ts - 1, requested);
    perfetto_counter(w, "reserved", device, ts - 1, reserved);
    std::int64_t shown_requested = requested;
    std::int64_t shown_reserved = reserved;
    for (std::size_t i = 0; i < trace.size(); ++i) {
      const auto& e = trace[i];
      ts = std::max(ts, e.time_us);  // counters must not go back in time
      perfetto_deltas(e, requested, reserved);
      if (e.action == TraceAction::oom) {
        w.begin_dict();
        w.field("name", "out of memory");
        w.field("ph", "i");
        w.field("s", "p");
        w.field("ts", ts);
        w.field("pid", device);
        w.field("tid", kPerfettoAllocatorTid);
        w.key("args");
        w.begin_dict();
        w.field("requested_bytes", e.size);
        w.field("device_free_bytes", e.addr);
        w.end_dict();
        w.end_dict();
      }
      const bool last_at_ts = i + 1 == trace.size() || trace[i + 1].time_us > ts;
      if (!last_at_ts) continue;
      if (requested != shown_requested) perfetto_counter(w, "requested", device, ts, requested);
      if (reserved != shown_reserved) perfetto_counter(w, "reserved", device, ts, reserved);
      shown_requested = requested;
      shown_reserved = reserved;
    }
  }

  // Annotation slices, matched START/END by name in nesting order.
  std::vector<const std::string*> open;
  for (const Annotation& a : snap.external_annotations) {
    if (a.device != device) continue;
    std::size_t closes = 0;
    if (!a.start) {
      const auto it = std::find_if(open.rbegin(), open.rend(), [&](const std::string* n) { return *n == a.name; });
      if (it == open.rend()) continue;  // its START was not recorded
      closes = static_cast<std::size_t>(it - open.rbegin()) + 1;
    }
    const std::size_t emit = a.start ? 1 : closes;
    for (std::size_t k = 0; k < emit; ++k) {
      w.begin_dict();
      w.field("name", a.start ? a.name : *open.back());
      w.field("ph", a.start ? "B" : "E");
      w.field("ts", a.time_us);
      w.field("pid", device);
      w.field("tid", kPerfettoAnnotationTid);
      w.end_dict();
      if (a.start) {
        open.push_back(&a.name);
      } else {
        open.pop_back();
      }
    }
  }
}

}  // namespace detail

/// Writes the trace-event JSON of `snap` (see the header comment) to a stream.
template <SnapshotLike S>
void write_perfetto(const S& snap, std::ostream& out) {
  std::set<int> devices;  // those with a trace, segments or annotations
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (!snap.device_traces[d].empty()) devices.insert(static_cast<int>(d));
  }
  for (const SnapshotSegment& seg : snap.segments) devices.insert(seg.device);
  for (const Annotation& a : snap.external_annotations) devices.insert(a.device);

  JsonWriter w(out);
  w.begin_dict();
  w.key("traceEvents");
  w.begin_list();
  for (const int d : devices) detail::perfetto_device(w, snap, d);
  w.end_list();
  w.field("displayTimeUnit", "ms");
  w.end_dict();
  w.finish();
}

/// Writes the trace-event JSON of `snap` to `path` atomically; IoError on failure.
template <SnapshotLike S>
void write_perfetto_file(const S& snap, const std::string& path) {
  write_file_atomically(path, [&](std::ostream& os) { write_perfetto(snap, os); });
}

GPUMEMPROF_NAMESPACE_END
