// The snapshot reader's bodies (snapshot_reader.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/snapshot_files.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/data_value.hpp"
#include "gpumemprof/codec/flat_item.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/codec/pickle_reader.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// A place in the document, built on the stack as the decoder descends; spelled out only
/// when an error needs it ("device_traces[0][12].size").
struct Where {
  const Where* parent = nullptr;
  std::string_view key;   // a field name, or empty for a list index
  std::size_t index = 0;  // the list index when key is empty

  [[nodiscard]] Where at(std::string_view k) const noexcept { return Where{this, k, 0}; }
  [[nodiscard]] Where at(std::size_t i) const noexcept { return Where{this, {}, i}; }
  [[nodiscard]] std::string str() const {
    if (parent == nullptr) return std::string(key);  // the document itself
    std::string head = parent->str();
    if (!key.empty()) return head.empty() ? std::string(key) : head + "." + std::string(key);
    return head + "[" + std::to_string(index) + "]";
  }
};

/// A FormatError that already names the file (not to be prefixed again).
class SnapshotDecodeError : public FormatError {
 public:
  using FormatError::FormatError;
};

/// Converts a DataValue tree in PyTorch's snapshot schema to a CompactSnapshot.
class SnapshotDecoder {
 public:
  explicit SnapshotDecoder(const std::string& name) : name_(name) {}

  /// Decodes trace entry `item` of device `device`'s trace as the pickle streams it.
  void streamed_entry(std::size_t device, std::size_t item, const DataValue& d) {
    const Where top{};  // each level named: a Where points at its parent
    const Where traces = top.at("device_traces");
    const Where trace = traces.at(device);
    const Where w = trace.at(item);
    streaming_ = true;
    streamed_trace(device).push_back(trace_entry(d, w));
    streaming_ = false;
  }
  /// The same for an entry the pickle reader handed over flat.
  void streamed_entry(std::size_t device, std::size_t item, const FlatItem& d) {
    const Where top{};  // each level named: a Where points at its parent
    const Where traces = top.at("device_traces");
    const Where trace = traces.at(device);
    const Where w = trace.at(item);
    EntryFields f;
    for (std::size_t i = 0; i < d.size; ++i) {
      if (const ValueView** field = f.slot(d.keys[i])) *field = &d.values[i];
    }
    streaming_ = true;
    streamed_trace(device).push_back(trace_entry(f, w));
    streaming_ = false;
  }

  CompactSnapshot decode(const DataValue& root) {
    if (root.is(K::list)) {
      fail(
          "a list at the top level, not a snapshot dict (torch.cuda.memory_snapshot() writes that list; "
          "torch.cuda.memory._snapshot() writes the snapshot with 'segments' and 'device_traces')");
    }
    if (!root.is(K::dict)) fail(std::string("a ") + to_string(root.kind()) + " at the top level, not a snapshot dict");
    const Where top{};
    CompactSnapshot snap;
    const DataValue* segments = root.find("segments");
    if (segments == nullptr) fail("not a memory snapshot: the top-level dict has no 'segments'");
    const Where ws = top.at("segments");
    need(*segments, K::list, ws);
    snap.segments.reserve(segments->size());
    for (std::size_t i = 0; i < segments->size(); ++i) snap.segments.push_back(segment(segments->items()[i], ws.at(i)));

    if (const DataValue* traces = root.find("device_traces")) {
      const Where wt = top.at("device_traces");
      need(*traces, K::list, wt);
      for (std::size_t d = 0; d < traces->size(); ++d) {
        const DataValue& trace = traces->items()[d];
        const Where wd = wt.at(d);
        need(trace, K::list, wd);
        CompactTrace entries = d < streamed_.size() ? std::move(streamed_[d]) : CompactTrace();
        for (std::size_t k = 0; k < trace.size(); ++k) entries.push_back(trace_entry(trace.items()[k], wd.at(k)));
        snap.device_traces.push_back(std::move(entries));
      }
    }
    if (const DataValue* settings = root.find("allocator_settings")) {
      need(*settings, K::dict, top.at("allocator_settings"));
      for (const auto& [k, v] : settings->entries()) add_setting(snap, key_text(k), v);
    }
    if (const DataValue* notes = root.find("external_annotations")) {
      const Where wa = top.at("external_annotations");
      need(*notes, K::list, wa);
      std::vector<std::int64_t> last_index;  // per device: the last trace_index seen
      for (std::size_t i = 0; i < notes->size(); ++i) {
        Annotation a = annotation(notes->items()[i], wa.at(i));
        if (a.trace_index >= 0) {  // ours: placed among the device's entries
          const auto d = static_cast<std::size_t>(a.device);
          const std::size_t entries = d < snap.device_traces.size() ? snap.device_traces[d].size() : 0;
          if (d >= last_index.size()) last_index.resize(d + 1, 0);
          if (static_cast<std::uint64_t>(a.trace_index) > entries || a.trace_index < last_index[d]) {
            fail(wa.at(i).at("trace_index"), std::to_string(a.trace_index) + " is out of order or past the " +
                                                 std::to_string(entries) + " entries of device_traces[" +
                                                 std::to_string(d) + "]");
          }
          last_index[d] = a.trace_index;
        }
        snap.external_annotations.push_back(std::move(a));
      }
    }
    if (root.find("rank") != nullptr) snap.rank_info = rank_info(root, top);
    if (const DataValue* devices = root.find("device_memory")) {  // ours; absent in PyTorch's
      const Where wm = top.at("device_memory");
      need(*devices, K::list, wm);
      for (std::size_t i = 0; i < devices->size(); ++i)
        snap.device_memory.push_back(device_memory(devices->items()[i], wm.at(i)));
    }
    if (const DataValue* changes = root.find("category_changes")) snap.category_changes = category_changes(*changes, snap, top);
    return snap;
  }

 private:
  using K = DataValue::Kind;
  static constexpr std::int64_t kMaxDevice = 65535;

  [[noreturn]] void fail(const std::string& what) const { throw SnapshotDecodeError(name_ + ": " + what); }
  [[noreturn]] void fail(const Where& w, const std::string& what) const { fail(w.str() + ": " + what); }
  void need(const DataValue& v, K kind, const Where& w) const {
    if (!v.is(kind)) fail(w, std::string("expected ") + to_string(kind) + ", found " + to_string(v.kind()));
  }
  static std::string key_text(const DataValue& k) {
    return k.is(DataValue::Kind::string) ? k.as_string() : std::to_string(k.as_int());
  }

  // ---- typed fields (absent -> fallback; present with the wrong type -> FormatError) ----
  // Each reads a ValueView (nullptr: absent), so that a dict and a flat trace entry decode alike.
  std::int64_t int_of(const ValueView* v, std::string_view key, const Where& w, std::int64_t fallback,
                      bool required = false) const {
    if (v == nullptr || v->is(K::none)) {
      if (required) fail(w, "missing '" + std::string(key) + "'");
      return fallback;
    }
    if (v->is(K::integer) || v->is(K::boolean)) return v->integer;
    fail(w.at(key), std::string("expected int, found ") + to_string(v->kind));
  }
  std::uint64_t size_of(const ValueView* v, std::string_view key, const Where& w, std::uint64_t fallback,
                        bool required = false) const {
    if (v == nullptr && !required) return fallback;
    const std::int64_t n = int_of(v, key, w, static_cast<std::int64_t>(fallback), required);
    if (n < 0) fail(w.at(key), "negative value " + std::to_string(n));
    return static_cast<std::uint64_t>(n);
  }
  std::int64_t time_of(const ValueView* v, const Where& w) const {
    if (v != nullptr && v->is(K::floating)) {
      const double t = v->floating;
      // (older writers used floats; a cast of NaN or of a value beyond int64 would be undefined)
      if (!(t >= -9.2e18 && t <= 9.2e18)) fail(w.at("time_us"), "time out of range");
      return static_cast<std::int64_t>(t);
    }
    return int_of(v, "time_us", w, 0);
  }
  std::string_view str_of(const ValueView* v, std::string_view key, const Where& w, std::string_view fallback,
                          bool required = false) const {
    if (v == nullptr || v->is(K::none)) {
      if (required) fail(w, "missing '" + std::string(key) + "'");
      return fallback;
    }
    if (!v->is(K::string)) fail(w.at(key), std::string("expected str, found ") + to_string(v->kind));
    return v->text;
  }
  // The same over a dict's key.
  std::int64_t int_field(const DataValue& d, std::string_view key, const Where& w, std::int64_t fallback,
                         bool required = false) const {
    const ValueView v = view(d, key);
    return int_of(v.memo == kAbsent ? nullptr : &v, key, w, fallback, required);
  }
  std::uint64_t size_field(const DataValue& d, std::string_view key, const Where& w, std::uint64_t fallback,
                           bool required = false) const {
    const ValueView v = view(d, key);
    return size_of(v.memo == kAbsent ? nullptr : &v, key, w, fallback, required);
  }
  std::int64_t time_field(const DataValue& d, const Where& w) const {
    const ValueView v = view(d, "time_us");
    return time_of(v.memo == kAbsent ? nullptr : &v, w);
  }
  int device_field(const DataValue& d, const Where& w) const {
    const std::int64_t v = int_field(d, "device", w, 0);
    if (v < 0 || v > kMaxDevice) fail(w.at("device"), "device index " + std::to_string(v) + " out of range");
    return static_cast<int>(v);
  }
  // segment_pool_id: a pair of ints (a tuple in PyTorch's pickles, a list in JSON); (0, 0) if absent.
  MempoolId pool_id_field(const DataValue& d, const Where& w) const {
    const DataValue* v = d.find("segment_pool_id");
    if (v == nullptr || v->is_none()) return {};
    const Where wp = w.at("segment_pool_id");
    if (!(v->is(K::tuple) || v->is(K::list)) || v->size() != 2 || !v->items()[0].is(K::integer) ||
        !v->items()[1].is(K::integer) || v->items()[0].as_int() < 0 || v->items()[1].as_int() < 0) {
      fail(wp, "expected a pair of non-negative ints (a pool id such as (0, 0))");
    }
    return {static_cast<std::uint64_t>(v->items()[0].as_int()), static_cast<std::uint64_t>(v->items()[1].as_int())};
  }
  bool bool_field(const DataValue& d, std::string_view key, const Where& w, bool fallback) const {
    const DataValue* v = d.find(key);
    if (v == nullptr || v->is_none()) return fallback;
    if (v->is(K::boolean)) return v->as_bool();
    if (v->is(K::integer)) return v->as_int() != 0;
    fail(w.at(key), std::string("expected bool, found ") + to_string(v->kind()));
  }
  std::string str_field(const DataValue& d, std::string_view key, const Where& w, std::string_view fallback,
                        bool required = false) const {
    const ValueView v = view(d, key);
    return std::string(str_of(v.memo == kAbsent ? nullptr : &v, key, w, fallback, required));
  }
  // d[key] as a view; memo == kAbsent when d has no such key.
  static constexpr std::uint32_t kAbsent = DataValue::kNoMemo - 1;
  static ValueView view(const DataValue& d, std::string_view key) {
    if (const DataValue* v = d.find(key)) return ValueView::of(*v);
    ValueView absent;
    absent.memo = kAbsent;
    return absent;
  }
  Frames frames_field(const DataValue& d, const Where& w) {
    const ValueView v = view(d, "frames");
    return frames(v.memo == kAbsent ? nullptr : &v, w.at("frames"));
  }

  // The fields of a trace entry, found in one pass over its keys (a later key wins, as in Python).
  struct EntryFields {
    static constexpr std::size_t kCount = 9;
    const ValueView* action = nullptr;
    const ValueView* addr = nullptr;
    const ValueView* device_free = nullptr;
    const ValueView* size = nullptr;
    const ValueView* stream = nullptr;
    const ValueView* time_us = nullptr;
    const ValueView* compile_context = nullptr;
    const ValueView* user_metadata = nullptr;
    const ValueView* frames = nullptr;
    /// The member for `key`, nullptr for a key a trace entry does not use.
    const ValueView** slot(std::string_view key) noexcept {
      static constexpr std::string_view kNames[] = {"action", "addr",           "device_free",   "size",  "stream",
                                                    "time_us", "compile_context", "user_metadata", "frames"};
      const ValueView** const fields[] = {&action,  &addr,           &device_free,   &size,  &stream,
                                          &time_us, &compile_context, &user_metadata, &frames};
      for (std::size_t i = 0; i < kCount; ++i) {
        if (key == kNames[i]) return fields[i];
      }
      return nullptr;
    }
  };

  // ---- schema ----
  SnapshotSegment segment(const DataValue& d, const Where& w) {
    need(d, K::dict, w);
    SnapshotSegment seg;
    seg.device = device_field(d, w);
    seg.address = size_field(d, "address", w, 0, true);
    seg.total_size = size_field(d, "total_size", w, 0, true);
    seg.stream = size_field(d, "stream", w, 0);
    const std::string type = str_field(d, "segment_type", w, "large");
    if (type != "large" && type != "small")
      fail(w.at("segment_type"), quote_input(type) + " is neither 'large' nor 'small'");
    seg.is_large = type == "large";
    seg.is_expandable = bool_field(d, "is_expandable", w, false);
    seg.pool_id = pool_id_field(d, w);
    seg.frames = frames_field(d, w);

    const DataValue* blocks = d.find("blocks");
    if (blocks == nullptr) fail(w, "missing 'blocks'");
    const Where wb = w.at("blocks");
    need(*blocks, K::list, wb);
    std::uint64_t addr = seg.address;
    std::uint64_t allocated = 0;
    std::uint64_t active = 0;
    std::uint64_t requested = 0;
    seg.blocks.reserve(blocks->size());
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      SnapshotBlock b = block(blocks->items()[i], wb.at(i), addr);
      addr = b.address + b.size;
      if (b.state == BlockState::active_allocated) allocated += b.size;
      if (b.state != BlockState::inactive) {
        active += b.size;
        requested += b.requested_size;
      }
      seg.blocks.push_back(std::move(b));
    }
    // Older PyTorch versions leave these out; they are sums over the blocks.
    seg.allocated_size = size_field(d, "allocated_size", w, allocated);
    seg.active_size = size_field(d, "active_size", w, active);
    seg.requested_size = size_field(d, "requested_size", w, requested);
    return seg;
  }

  SnapshotBlock block(const DataValue& d, const Where& w, std::uint64_t next_address) {
    need(d, K::dict, w);
    SnapshotBlock b;
    b.size = size_field(d, "size", w, 0, true);
    const std::string state = str_field(d, "state", w, "", true);
    if (state == "active_allocated") {
      b.state = BlockState::active_allocated;
    } else if (state == "active_pending_free") {
      b.state = BlockState::active_pending_free;
    } else if (state == "inactive") {
      b.state = BlockState::inactive;
    } else {
      fail(w.at("state"), "unknown block state " + quote_input(state));
    }
    b.address = size_field(d, "address", w, next_address);
    b.requested_size = size_field(d, "requested_size", w, b.state == BlockState::inactive ? 0 : b.size);
    b.frames = frames_field(d, w);
    b.category = str_field(d, "category", w, "");  // ours; absent in PyTorch's
    return b;
  }

  // Our key "category_changes" (history/snapshot.hpp): per device, changes placed in order
  // within that device's trace.
  std::vector<std::vector<CategoryChange>> category_changes(const DataValue& list, const CompactSnapshot& snap,
                                                            const Where& top) const {
    const Where wl = top.at("category_changes");
    need(list, K::list, wl);
    std::vector<std::vector<CategoryChange>> out(list.size());
    for (std::size_t d = 0; d < list.size(); ++d) {
      const DataValue& changes = list.items()[d];
      const Where wd = wl.at(d);
      need(changes, K::list, wd);
      const std::size_t entries = d < snap.device_traces.size() ? snap.device_traces[d].size() : 0;
      for (std::size_t i = 0; i < changes.size(); ++i) {
        const DataValue& c = changes.items()[i];
        const Where wc = wd.at(i);
        need(c, K::dict, wc);
        CategoryChange& ch = out[d].emplace_back();
        ch.trace_index = size_field(c, "trace_index", wc, 0, true);
        if (ch.trace_index > entries || (i > 0 && ch.trace_index < out[d][i - 1].trace_index)) {
          fail(wc.at("trace_index"), std::to_string(ch.trace_index) + " is out of order or past the " +
                                         std::to_string(entries) + " entries of device_traces[" + std::to_string(d) +
                                         "]");
        }
        ch.time_us = time_field(c, wc);
        ch.addr = size_field(c, "addr", wc, 0, true);
        ch.size = size_field(c, "size", wc, 0);
        ch.category = str_field(c, "category", wc, "");
        ch.previous = str_field(c, "previous", wc, "");
      }
    }
    return out;
  }

  CompactTrace& streamed_trace(std::size_t device) {
    if (device > static_cast<std::size_t>(kMaxDevice)) {
      fail("device_traces: more than " + std::to_string(kMaxDevice + 1) + " device traces");
    }
    if (streamed_.size() <= device) streamed_.resize(device + 1);
    return streamed_[device];
  }

  TraceEntry trace_entry(const DataValue& d, const Where& w) {
    need(d, K::dict, w);
    std::array<ValueView, EntryFields::kCount> views;  // dict keys are unique: one per field at most
    std::size_t n = 0;
    EntryFields f;
    for (const auto& [k, v] : d.entries()) {
      const ValueView** field = k.is(K::string) ? f.slot(k.as_string()) : nullptr;
      if (field == nullptr) continue;
      views[n] = ValueView::of(v);
      *field = &views[n++];
    }
    return trace_entry(f, w);
  }
  TraceEntry trace_entry(const EntryFields& f, const Where& w) {
    TraceEntry e;
    const std::string_view action = str_of(f.action, "action", w, "", true);
    if (!parse_action(action, e.action)) fail(w.at("action"), "unknown action " + quote_input(action));
    const bool free_bytes = e.action == TraceAction::oom && f.device_free != nullptr;
    e.addr = size_of(free_bytes ? f.device_free : f.addr, free_bytes ? "device_free" : "addr", w, 0);
    e.size = size_of(f.size, "size", w, 0);
    e.stream = size_of(f.stream, "stream", w, 0);
    e.time_us = time_of(f.time_us, w);
    e.compile_context = str_of(f.compile_context, "compile_context", w, "N/A");
    e.user_metadata = str_of(f.user_metadata, "user_metadata", w, "");
    e.frames = frames(f.frames, w.at("frames"));
    return e;
  }

  static bool parse_action(std::string_view s, TraceAction& out) noexcept {
    for (auto a : {TraceAction::alloc, TraceAction::free_requested, TraceAction::free_completed,
                   TraceAction::segment_alloc, TraceAction::segment_free, TraceAction::segment_map,
                   TraceAction::segment_unmap, TraceAction::snapshot, TraceAction::oom}) {
      if (s == to_string(a)) {
        out = a;
        return true;
      }
    }
    return false;
  }

  Annotation annotation(const DataValue& d, const Where& w) const {
    need(d, K::dict, w);
    Annotation a;
    a.name = str_field(d, "name", w, "");
    const std::string stage = str_field(d, "stage", w, "", true);
    if (stage != "START" && stage != "END") fail(w.at("stage"), quote_input(stage) + " is neither 'START' nor 'END'");
    a.start = stage == "START";
    a.device = device_field(d, w);
    a.time_us = time_field(d, w);
    if (view(d, "trace_index").memo != kAbsent)
      a.trace_index = static_cast<std::int64_t>(size_field(d, "trace_index", w, 0));
    return a;
  }

  // The keys of a per-rank dump (RankInfo); a rank file that has "rank" must have them right.
  RankInfo rank_info(const DataValue& root, const Where& top) const {
    RankInfo r;
    r.rank = int_field(root, "rank", top, -1);
    if (r.rank < 0) fail(top.at("rank"), "negative rank " + std::to_string(r.rank));
    r.world_size = int_field(root, "world_size", top, 0);
    if (r.world_size <= r.rank) {
      fail(top.at("world_size"), "world size " + std::to_string(r.world_size) + " does not include rank " +
                                     std::to_string(r.rank));
    }
    r.host = str_field(root, "host", top, "");
    r.device = str_field(root, "device", top, "");
    r.peak_allocated_bytes = int_field(root, "peak_allocated_bytes", top, -1);
    r.peak_reserved_bytes = int_field(root, "peak_reserved_bytes", top, -1);
    r.num_ooms = int_field(root, "num_ooms", top, -1);
    return r;
  }

  std::vector<OwnerMemory> owners(const DataValue& d, std::string_view key, const Where& w) const {
    std::vector<OwnerMemory> out;
    const DataValue* list = d.find(key);
    if (list == nullptr) return out;
    const Where wl = w.at(key);
    need(*list, K::list, wl);
    for (std::size_t i = 0; i < list->size(); ++i) {
      const DataValue& o = list->items()[i];
      const Where wo = wl.at(i);
      need(o, K::dict, wo);
      OwnerMemory& m = out.emplace_back(OwnerMemory{str_field(o, "owner", wo, "", true),
                                                    size_field(o, "bytes", wo, 0, true), size_field(o, "count", wo, 0),
                                                    str_field(o, "top_site", wo, ""), {}});
      if (const DataValue* stack = o.find("top_stack"); stack != nullptr && !stack->is_none()) {
        const Where ws = wo.at("top_stack");
        need(*stack, K::list, ws);
        for (std::size_t f = 0; f < stack->size(); ++f) {
          const DataValue& frame = stack->items()[f];
          need(frame, K::string, ws.at(f));
          m.top_stack.emplace_back(frame.as_string());
        }
      }
    }
    return out;
  }

  DeviceMemory device_memory(const DataValue& d, const Where& w) const {
    need(d, K::dict, w);
    DeviceMemory m;
    m.device = str_field(d, "device", w, "", true);
    m.total = size_field(d, "total", w, 0, true);
    m.used = size_field(d, "used", w, 0, true);
    m.allocated = size_field(d, "allocated", w, 0);
    m.reserved = size_field(d, "reserved", w, 0);
    m.external = size_field(d, "external", w, 0);
    m.external_by_owner = owners(d, "external_by_owner", w);
    m.code = size_field(d, "code", w, 0);
    m.code_by_owner = owners(d, "code_by_owner", w);
    m.context = size_field(d, "context", w, 0);
    m.unattributed = int_field(d, "unattributed", w, 0);
    m.tracking = bool_field(d, "tracking", w, false);
    return m;
  }

  void add_setting(CompactSnapshot& snap, std::string name, const DataValue& v) const {
    switch (v.kind()) {
      case K::boolean: snap.allocator_settings.emplace_back(std::move(name), v.as_bool()); return;
      case K::integer: snap.allocator_settings.emplace_back(std::move(name), v.as_int()); return;
      case K::floating: snap.allocator_settings.emplace_back(std::move(name), v.as_double()); return;
      case K::string: snap.allocator_settings.emplace_back(std::move(name), v.as_string()); return;
      case K::dict: {
        std::vector<std::pair<std::string, std::int64_t>> table;
        for (const auto& [k, x] : v.entries()) {
          if (!x.is(K::integer)) return;  // not a shape SettingValue holds: skipped
          table.emplace_back(key_text(k), x.as_int());
        }
        snap.allocator_settings.emplace_back(std::move(name), std::move(table));
        return;
      }
      default: return;  // None, lists, ...: settings of later PyTorch versions we cannot hold
    }
  }

  // Frames: the same list object (memo) or an equal list becomes one shared Frames.
  Frames frames(const ValueView* view, const Where& w) {
    if (view == nullptr || view->is(K::none)) return nullptr;
    if (!view->is(K::list)) fail(w, std::string("expected list, found ") + to_string(view->kind));
    if (view->released) {  // a frames list of an earlier streamed entry, shared through the memo
      if (const auto it = by_memo_.find(view->memo); it != by_memo_.end()) return it->second;
      fail(w, "refers (pickle memo " + std::to_string(view->memo) +
                  ") to a list inside an earlier trace entry that was not its frames; the streaming reader keeps "
                  "only those");
    }
    const DataValue* v = view->container;
    if (v->size() == 0) {
      if (v->memo_index() != DataValue::kNoMemo) by_memo_[v->memo_index()] = nullptr;
      return nullptr;
    }
    if (const auto it = by_identity_.find(v->identity()); it != by_identity_.end()) return it->second.second;
    std::vector<Frame> stack;
    stack.reserve(v->size());
    std::size_t h = v->size();
    for (std::size_t i = 0; i < v->size(); ++i) {
      const DataValue& f = v->items()[i];
      const Where wf = w.at(i);
      need(f, K::dict, wf);
      Frame frame;
      frame.filename = str_field(f, "filename", wf, "");
      frame.line = int_field(f, "line", wf, 0);
      frame.name = str_field(f, "name", wf, "");
      h = h * 1000003U ^ std::hash<std::string>{}(frame.filename) ^ (std::hash<std::string>{}(frame.name) << 1) ^
          std::hash<std::int64_t>{}(frame.line);
      stack.push_back(std::move(frame));
    }
    Frames shared;
    auto& bucket = by_content_[h];
    for (const Frames& known : bucket) {
      if (*known == stack) {
        shared = known;
        break;
      }
    }
    if (!shared) {
      shared = std::make_shared<const std::vector<Frame>>(std::move(stack));
      bucket.push_back(shared);
    }
    // Only a list the memo holds can come again: by identity while it is alive (holding it keeps
    // its address from being reused), by memo index once the streaming reader released it.
    if (v->memo_index() != DataValue::kNoMemo) {
      by_memo_[v->memo_index()] = shared;
      if (!streaming_) by_identity_.emplace(v->identity(), std::make_pair(*v, shared));
    }
    return shared;
  }

  std::string name_;
  std::unordered_map<const void*, std::pair<DataValue, Frames>> by_identity_;
  std::vector<CompactTrace> streamed_;                 // device -> entries streamed so far
  std::unordered_map<std::uint32_t, Frames> by_memo_;  // memoized frames lists, by memo index
  bool streaming_ = false;                             // decoding a streamed entry
  std::unordered_map<std::size_t, std::vector<Frames>> by_content_;
};

}  // namespace detail

GPUMEMPROF_FUNC Snapshot snapshot_from_value(const DataValue& root, const std::string& name) {
  return detail::SnapshotDecoder(name).decode(root).expand();
}

namespace detail {

/// Reads a snapshot -- a pickle through `read(stream)` (its trace entries streamed into the
/// decoder), or JSON through `json()` -- and decodes it. Errors start with `name`.
template <class ReadPickle, class ReadJson>
CompactSnapshot decode_snapshot(const std::string& name, bool is_pickle, ReadPickle read, ReadJson json) {
  SnapshotDecoder decoder(name);
  DataValue root;
  try {
    if (is_pickle) {
      const PickleItemStream stream{
          "device_traces",
          [&](std::size_t list, std::size_t item, const DataValue& v) { decoder.streamed_entry(list, item, v); },
          [&](std::size_t list, std::size_t item, const FlatItem& v) { decoder.streamed_entry(list, item, v); }};
      root = read(&stream);
    } else {
      root = json();
    }
  } catch (const SnapshotDecodeError&) {
    throw;
  } catch (const FormatError& e) {
    throw FormatError(name + ": " + e.what());
  }
  return decoder.decode(root);
}

/// Whether bytes look like a pickle (PROTO) or JSON; throws FormatError otherwise.
inline bool snapshot_is_pickle(std::string_view bytes) {
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) return true;
  const std::size_t first = bytes.find_first_not_of(" \n\r\t");
  if (first != std::string_view::npos && (bytes[first] == '{' || bytes[first] == '[')) return false;
  if (bytes.empty()) throw FormatError("the file is empty");
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    throw FormatError("gzip-compressed (first bytes 1f 8b): gunzip it first");
  }
  throw FormatError("not a snapshot: neither a pickle (first byte 0x80) nor JSON (first character '{')");
}

}  // namespace detail

GPUMEMPROF_FUNC CompactSnapshot parse_compact_snapshot(std::string_view bytes, const std::string& name) {
  bool is_pickle = false;
  try {
    is_pickle = detail::snapshot_is_pickle(bytes);
  } catch (const FormatError& e) {
    throw FormatError(name + ": " + e.what());
  }
  return detail::decode_snapshot(
      name, is_pickle, [&](const PickleItemStream* s) { return read_pickle(bytes, {}, s); },
      [&] { return parse_json(bytes); });
}

GPUMEMPROF_FUNC Snapshot parse_snapshot(std::string_view bytes, const std::string& name) {
  return parse_compact_snapshot(bytes, name).expand();
}

GPUMEMPROF_FUNC CompactSnapshot load_compact_snapshot(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rbe"), &std::fclose);
  if (!file) detail::throw_io("read", path, errno);
  struct stat st {};
  if (::fstat(::fileno(file.get()), &st) != 0) detail::throw_io("read", path, errno);
  if (S_ISDIR(st.st_mode)) detail::throw_io("read", path, EISDIR);
  if (!S_ISREG(st.st_mode)) return parse_compact_snapshot(read_file(path), path);  // a pipe: no size to stream by
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // Only a pickle (PROTO first) is streamed; anything else gets parse_compact_snapshot's checks.
  if (size == 0 || std::fgetc(file.get()) != 0x80) return parse_compact_snapshot(read_file(path), path);
  std::rewind(file.get());
  return detail::decode_snapshot(
      path, true, [&](const PickleItemStream* s) { return read_pickle_file(file.get(), size, {}, s); },
      [] { return DataValue(); });
}

GPUMEMPROF_FUNC Snapshot load_snapshot(const std::string& path) { return load_compact_snapshot(path).expand(); }

GPUMEMPROF_NAMESPACE_END
