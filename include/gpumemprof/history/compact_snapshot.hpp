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

  CompactTrace();

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

  void push_back(const TraceEntry& e);

  /// The entries as TraceEntry values (for a Snapshot).
  [[nodiscard]] std::vector<TraceEntry> expand() const;

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

  std::uint32_t intern_stream(std::uint64_t s);
  std::uint32_t intern_frames(const Frames& f);
  std::uint32_t intern_context(const std::string& compile_context, const std::string& user_metadata);

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
  [[nodiscard]] Snapshot expand() &&;
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

// The bodies that build and expand traces: in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/snapshot_files.cpp, beside the snapshot reader that builds them).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/history/compact_snapshot-inl.hpp"
#endif
