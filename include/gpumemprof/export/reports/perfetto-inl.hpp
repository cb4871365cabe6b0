// The Perfetto trace writer's bodies (perfetto.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/reports.cpp, for Snapshot and
// CompactSnapshot) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
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

template <SnapshotLike S>
void perfetto_device(ValueWriter& w, const S& snap, int device) {
  perfetto_metadata(w, "process_name", device, 0, "GPU " + std::to_string(device) + " memory");
  perfetto_metadata(w, "thread_name", device, kPerfettoAllocatorTid, "allocator");
  perfetto_metadata(w, "thread_name", device, kPerfettoAnnotationTid, "annotations");

  const TraceTimeline<S> timeline(snap, device);
  const auto& trace = timeline.trace();
  if (!trace.empty()) {
    std::int64_t ts = trace.front().time_us;
    TimelineLevels shown = timeline.start();
    perfetto_counter(w, "requested", device, ts - 1, shown.requested);
    perfetto_counter(w, "reserved", device, ts - 1, shown.reserved);
    timeline.walk([&](std::size_t i, const auto& e, const TimelineLevels& level, const auto&) {
      ts = std::max(ts, e.time_us);  // counters must not go back in time
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
      if (!last_at_ts) return;
      if (level.requested != shown.requested) perfetto_counter(w, "requested", device, ts, level.requested);
      if (level.reserved != shown.reserved) perfetto_counter(w, "reserved", device, ts, level.reserved);
      shown = level;
    });
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

template <SnapshotLike S>
void write_perfetto_file(const S& snap, const std::string& path) {
  write_file_atomically(path, [&](std::ostream& os) { write_perfetto(snap, os); });
}

GPUMEMPROF_NAMESPACE_END
