// Layer 3: a snapshot whose traces are held compactly -- what the snapshot reader builds for the
// reports, so that a 10M-entry history fits in a few hundred MB instead of several GB.
//
// A CompactSnapshot has Snapshot's members by the same names (segments, device_traces,
// allocator_settings, external_annotations); only a trace differs: a CompactTrace stores each
// entry as 40 bytes (addr, size, time, action and indices into per-trace tables of streams,
// frame lists and compile_context/user_metadata pairs), in fixed-size chunks so that growing it
// never copies. Reading an entry gives a CompactTrace::Entry with TraceEntry's field names, so
// code written against `snap.device_traces[d][i].size` works on either kind of snapshot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One device's trace, compactly (see the file comment). Frames lists are shared by pointer.
class CompactTrace {
 public:
  /// One entry, read back: TraceEntry's fields (strings and frames by reference into the trace).
  struct Entry {
    TraceAction action;
    std::uint64_t addr;
    std::uint64_t size;
    std::uint64_t stream;
    std::int64_t time_us;
    const Frames& frames;
    const std::string& compile_context;
    const std::string& user_metadata;
  };

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    Iterator(const CompactTrace* t, std::size_t i) : t_(t), i_(i) {}
    Entry operator*() const { return (*t_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) noexcept { return a.i_ == b.i_; }

   private:
    const CompactTrace* t_;
    std::size_t i_;
  };

  CompactTrace() {
    frames_.emplace_back();  // index 0: no frames
    contexts_.emplace_back("N/A", "");
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] Entry operator[](std::size_t i) const {
    const Packed& p = chunks_[i >> kChunkBits][i & (kChunkSize - 1)];
    const auto& ctx = contexts_[p.context];
    return Entry{p.action, p.addr, p.size, streams_[p.stream], p.time_us, frames_[p.frames], ctx.first, ctx.second};
  }
  [[nodiscard]] Entry front() const { return (*this)[0]; }
  [[nodiscard]] Entry back() const { return (*this)[size_ - 1]; }
  [[nodiscard]] Iterator begin() const { return {this, 0}; }
  [[nodiscard]] Iterator end() const { return {this, size_}; }

  void push_back(const TraceEntry& e) {
    if ((size_ & (kChunkSize - 1)) == 0) chunks_.push_back(std::make_unique<Packed[]>(kChunkSize));
    Packed& p = chunks_.back()[size_ & (kChunkSize - 1)];
    p.addr = e.addr;
    p.size = e.size;
    p.time_us = e.time_us;
    p.action = e.action;
    p.stream = intern_stream(e.stream);
    p.frames = intern_frames(e.frames);
    p.context = intern_context(e.compile_context, e.user_metadata);
    ++size_;
  }

  /// The entries as TraceEntry values (for a Snapshot).
  [[nodiscard]] std::vector<TraceEntry> expand() const {
    std::vector<TraceEntry> out;
    out.reserve(size_);
    for (const Entry& e : *this) {
      out.push_back(
          TraceEntry{e.action, e.addr, e.size, e.stream, e.time_us, e.compile_context, e.user_metadata, e.frames});
    }
    return out;
  }

 private:
  static constexpr unsigned kChunkBits = 16;
  static constexpr std::size_t kChunkSize = std::size_t{1} << kChunkBits;
  struct Packed {
    std::uint64_t addr = 0;
    std::uint64_t size = 0;
    std::int64_t time_us = 0;
    std::uint32_t stream = 0;
    std::uint32_t frames = 0;
    std::uint32_t context = 0;
    TraceAction action = TraceAction::alloc;
  };
  static_assert(sizeof(Packed) <= 40, "an entry stays at 40 bytes");

  std::uint32_t intern_stream(std::uint64_t s) {
    if (s == last_stream_value_ && !streams_.empty()) return last_stream_;
    const auto [it, added] = stream_index_.try_emplace(s, static_cast<std::uint32_t>(streams_.size()));
    if (added) streams_.push_back(s);
    last_stream_value_ = s;
    last_stream_ = it->second;
    return it->second;
  }
  std::uint32_t intern_frames(const Frames& f) {
    if (!f) return 0;
    const auto [it, added] = frames_index_.try_emplace(f.get(), static_cast<std::uint32_t>(frames_.size()));
    if (added) frames_.push_back(f);  // kept alive here, so the pointer key stays unique
    return it->second;
  }
  std::uint32_t intern_context(const std::string& compile_context, const std::string& user_metadata) {
    if (compile_context == "N/A" && user_metadata.empty()) return 0;
    std::string key = compile_context;
    key.push_back('\0');
    key += user_metadata;
    const auto [it, added] = context_index_.try_emplace(std::move(key), static_cast<std::uint32_t>(contexts_.size()));
    if (added) contexts_.emplace_back(compile_context, user_metadata);
    return it->second;
  }

  std::vector<std::unique_ptr<Packed[]>> chunks_;
  std::size_t size_ = 0;
  std::vector<std::uint64_t> streams_;
  std::unordered_map<std::uint64_t, std::uint32_t> stream_index_;
  std::uint64_t last_stream_value_ = 0;
  std::uint32_t last_stream_ = 0;
  std::vector<Frames> frames_;
  std::unordered_map<const void*, std::uint32_t> frames_index_;
  std::vector<std::pair<std::string, std::string>> contexts_;
  std::unordered_map<std::string, std::uint32_t> context_index_;
};

/// A snapshot with compact traces: Snapshot's members, by the same names.
struct CompactSnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<CompactTrace> device_traces;  ///< index = device, oldest entry first
  std::vector<std::vector<CategoryChange>> category_changes;  ///< as Snapshot's
  std::vector<std::pair<std::string, SettingValue>> allocator_settings;
  std::vector<Annotation> external_annotations;
  RankInfo rank_info;
  std::vector<DeviceMemory> device_memory;

  /// The same snapshot with its traces expanded into TraceEntry values.
  [[nodiscard]] Snapshot expand() && {
    Snapshot s;
    s.segments = std::move(segments);
    for (CompactTrace& t : device_traces) {
      s.device_traces.push_back(t.expand());
      t = CompactTrace();
    }
    s.category_changes = std::move(category_changes);
    s.allocator_settings = std::move(allocator_settings);
    s.external_annotations = std::move(external_annotations);
    s.rank_info = std::move(rank_info);
    s.device_memory = std::move(device_memory);
    return s;
  }
};

/// Snapshot or CompactSnapshot: what the reports and the replay read.
template <class S>
concept SnapshotLike = requires(const S& s) {
  s.segments.size();
  s.device_traces.size();
  s.device_traces[0].size();
  s.allocator_settings.size();
  s.external_annotations.size();
};

GPUMEMPROF_NAMESPACE_END
