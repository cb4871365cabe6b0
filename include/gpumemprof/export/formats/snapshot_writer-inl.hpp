// The snapshot writer's bodies (snapshot_writer.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/snapshot_files.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/codec/pickle_writer.hpp"
#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/formats/owners_writer.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

// Names written many times go through the memo by address (string literals have one).
inline void write_name(ValueWriter& w, const char* name) {
  if (w.reuse(name)) return;
  w.value(name);
  w.remember(name);
}

/// Frame strings written so far, by content, with the key each was remembered under (the address
/// of its first occurrence, which lives as long as the snapshot being written).
using FrameStrings = std::unordered_map<std::string_view, const void*>;

inline void write_frame_string(ValueWriter& w, const std::string& text, FrameStrings& seen) {
  const auto [it, fresh] = seen.try_emplace(text, text.data());
  if (!fresh && w.reuse(it->second)) return;
  w.value(text);
  if (fresh) w.remember(it->second);
}

inline void write_frames(ValueWriter& w, const Frames& frames, FrameStrings& strings) {
  if (!frames || frames->empty()) {
    w.begin_list();
    w.end_list();
    return;
  }
  if (w.reuse(frames.get())) return;
  w.begin_list();
  for (const Frame& f : *frames) {
    w.begin_dict();  // PyTorch's key order
    w.key("name");
    write_frame_string(w, f.name, strings);
    w.key("filename");
    write_frame_string(w, f.filename, strings);
    w.field("line", f.line);
    w.end_dict();
  }
  w.end_list();
  w.remember(frames.get());
}

inline void write_segment(ValueWriter& w, const SnapshotSegment& seg, FrameStrings& strings) {
  w.begin_dict();
  w.field("device", seg.device);
  w.field("address", seg.address);
  w.field("total_size", seg.total_size);
  w.field("allocated_size", seg.allocated_size);
  w.field("active_size", seg.active_size);
  w.field("requested_size", seg.requested_size);
  w.field("stream", seg.stream);
  w.key("segment_type");
  write_name(w, seg.is_large ? "large" : "small");
  w.key("segment_pool_id");  // the private pool's id; (0, 0) = the default pools
  w.begin_tuple();
  w.value(seg.pool_id.first);
  w.value(seg.pool_id.second);
  w.end_tuple();
  w.field("is_expandable", seg.is_expandable);
  // PyTorch adds an empty frames list before the blocks and a gathered one after them.
  const bool has_frames = seg.frames && !seg.frames->empty();
  if (!has_frames) {
    w.key("frames");
    write_frames(w, seg.frames, strings);
  }
  w.key("blocks");
  w.begin_list();
  for (const SnapshotBlock& b : seg.blocks) {
    w.begin_dict();
    w.field("address", b.address);
    w.field("size", b.size);
    w.field("requested_size", b.requested_size);
    w.key("state");
    write_name(w, to_string(b.state));
    w.key("frames");
    write_frames(w, b.frames, strings);
    if (!b.category.empty()) w.field("category", b.category);  // ours: see SnapshotBlock::category
    w.end_dict();
  }
  w.end_list();
  if (has_frames) {
    w.key("frames");
    write_frames(w, seg.frames, strings);
  }
  w.end_dict();
}

/// The category PyTorch's memory viewer reads from a trace entry's "category" key, for its
/// colours and its legend: the allocation's category, "unknown" for untagged entries.
inline std::string_view viewer_category(const TraceEntry& e) {
  const std::string_view c = category_of_metadata(e.user_metadata);
  return c.empty() ? std::string_view(category::unknown) : c;
}

/// Whether the entries get a "category" key: when some entry has a category and some has none.
/// The viewer (torch/utils/viz/MemoryViz.js) lists the categories of the entries in its legend
/// and needs "unknown" among them once there are any: it colours blocks held from before the
/// trace as "unknown", and a list without it ends in a script error there.
inline bool write_viewer_categories(const Snapshot& snap) {
  bool tagged = false;
  bool untagged = false;
  for (const auto& trace : snap.device_traces) {
    for (const TraceEntry& e : trace) {
      (category_of_metadata(e.user_metadata).empty() ? untagged : tagged) = true;
      if (tagged && untagged) return true;
    }
  }
  return false;
}

inline void write_trace_entry(ValueWriter& w, const TraceEntry& e, FrameStrings& strings, bool categories) {
  static constexpr const char* kNotAvailable = "N/A";
  w.begin_dict();
  w.key("action");
  write_name(w, to_string(e.action));
  w.field(e.action == TraceAction::oom ? "device_free" : "addr", e.addr);
  w.field("size", e.size);
  w.field("stream", e.stream);
  w.field("time_us", e.time_us);
  w.key("compile_context");
  if (e.compile_context == kNotAvailable) {
    write_name(w, kNotAvailable);
  } else {
    w.value(e.compile_context);
  }
  w.field("user_metadata", e.user_metadata);
  w.key("frames");
  write_frames(w, e.frames, strings);
  if (categories) w.field("category", viewer_category(e));  // ours, where the viewer reads it
  w.end_dict();
}

// Our key, beside PyTorch's: the viewers read only the keys they know.
inline void write_device_memory(ValueWriter& w, const std::vector<DeviceMemory>& devices) {
  if (devices.empty()) return;  // PyTorch's own snapshots stay byte for byte as they were
  w.key("device_memory");
  w.begin_list();
  for (const DeviceMemory& m : devices) {
    w.begin_dict();
    w.field("device", m.device);
    w.field("total", m.total);
    w.field("used", m.used);
    w.field("allocated", m.allocated);
    w.field("reserved", m.reserved);
    w.field("external", m.external);
    write_owners(w, "external_by_owner", m.external_by_owner);
    w.field("code", m.code);
    write_owners(w, "code_by_owner", m.code_by_owner);
    w.field("context", m.context);
    w.field("unattributed", m.unattributed);
    w.field("tracking", m.tracking);
    w.end_dict();
  }
  w.end_list();
}

inline void write_setting(ValueWriter& w, const SettingValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<std::pair<std::string, std::int64_t>>>) {
          w.begin_dict();
          for (const auto& [k, n] : x) w.field(k, n);
          w.end_dict();
        } else {
          w.value(x);
        }
      },
      v);
}

// Our key, beside device_traces (whose entries may use PyTorch's actions only): one list per
// device index of the live allocations' category moves (history/snapshot.hpp, CategoryChange).
inline void write_category_changes(ValueWriter& w, const std::vector<std::vector<CategoryChange>>& devices) {
  if (devices.empty()) return;  // PyTorch's own snapshots stay byte for byte as they were
  w.key("category_changes");
  w.begin_list();
  for (const auto& changes : devices) {
    w.begin_list();
    for (const CategoryChange& c : changes) {
      w.begin_dict();
      w.field("trace_index", static_cast<std::uint64_t>(c.trace_index));
      w.field("time_us", c.time_us);
      w.field("addr", c.addr);
      w.field("size", c.size);
      w.field("category", c.category);
      w.field("previous", c.previous);
      w.end_dict();
    }
    w.end_list();
  }
  w.end_list();
}

// Keys PyTorch's viewers ignore: which rank of a multi-process run wrote the snapshot.
inline void write_rank_info(ValueWriter& w, const RankInfo& r) {
  w.field("rank", r.rank);
  w.field("world_size", r.world_size);
  w.field("host", r.host);
  w.field("device", r.device);
  w.field("peak_allocated_bytes", r.peak_allocated_bytes);
  w.field("peak_reserved_bytes", r.peak_reserved_bytes);
  w.field("num_ooms", r.num_ooms);
}

}  // namespace detail

GPUMEMPROF_FUNC void write_snapshot(const Snapshot& snap, ValueWriter& w) {
  detail::FrameStrings strings;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (const SnapshotSegment& seg : snap.segments) detail::write_segment(w, seg, strings);
  w.end_list();

  w.key("device_traces");
  w.begin_list();
  const bool categories = detail::write_viewer_categories(snap);
  for (const auto& trace : snap.device_traces) {
    w.begin_list();
    for (const TraceEntry& e : trace) detail::write_trace_entry(w, e, strings, categories);
    w.end_list();
  }
  w.end_list();

  w.key("allocator_settings");
  w.begin_dict();
  for (const auto& [name, v] : snap.allocator_settings) {
    w.key(name);
    detail::write_setting(w, v);
  }
  w.end_dict();

  w.key("external_annotations");
  w.begin_list();
  for (const Annotation& a : snap.external_annotations) {
    w.begin_dict();
    w.key("stage");
    detail::write_name(w, a.start ? "START" : "END");
    w.field("name", a.name);
    w.field("device", a.device);
    w.field("time_us", a.time_us);
    if (a.trace_index >= 0) w.field("trace_index", a.trace_index);
    w.end_dict();
  }
  w.end_list();
  if (snap.rank_info.known()) detail::write_rank_info(w, snap.rank_info);
  detail::write_device_memory(w, snap.device_memory);
  detail::write_category_changes(w, snap.category_changes);
  w.end_dict();
}

GPUMEMPROF_FUNC void write_snapshot(const Snapshot& snap, std::ostream& out, SnapshotFormat format) {
  if (format == SnapshotFormat::json) {
    JsonWriter w(out);
    write_snapshot(snap, w);
    w.finish();
  } else {
    PickleWriter w(out);
    write_snapshot(snap, w);
    w.finish();
  }
}

GPUMEMPROF_FUNC void write_snapshot_file(const Snapshot& snap, const std::string& path) {
  const SnapshotFormat format = snapshot_format_for(path);
  write_file_atomically(path, [&](std::ostream& os) { write_snapshot(snap, os, format); });
}

GPUMEMPROF_NAMESPACE_END
