// Layer 3: the bodies that build compact traces and expand them into Snapshot values. Included by
// compact_snapshot.hpp in header-only mode; compiled once in the library (lib/snapshot_files.cpp)
// for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC CompactTrace::CompactTrace() {
  frames_.emplace_back();  // index 0: no frames
  contexts_.emplace_back("N/A", "");
}

GPUMEMPROF_FUNC void CompactTrace::push_back(const TraceEntry& e) {
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

GPUMEMPROF_FUNC std::vector<TraceEntry> CompactTrace::expand() const {
  std::vector<TraceEntry> out;
  out.reserve(size_);
  for (const Entry& e : *this) {
    out.push_back(
        TraceEntry{e.action, e.addr, e.size, e.stream, e.time_us, e.compile_context, e.user_metadata, e.frames});
  }
  return out;
}

GPUMEMPROF_FUNC std::uint32_t CompactTrace::intern_stream(std::uint64_t s) {
  if (s == last_stream_value_ && !streams_.empty()) return last_stream_;
  const auto [it, added] = stream_index_.try_emplace(s, static_cast<std::uint32_t>(streams_.size()));
  if (added) streams_.push_back(s);
  last_stream_value_ = s;
  last_stream_ = it->second;
  return it->second;
}

GPUMEMPROF_FUNC std::uint32_t CompactTrace::intern_frames(const Frames& f) {
  if (!f) return 0;
  const auto [it, added] = frames_index_.try_emplace(f.get(), static_cast<std::uint32_t>(frames_.size()));
  if (added) frames_.push_back(f);  // kept alive here, so the pointer key stays unique
  return it->second;
}

GPUMEMPROF_FUNC std::uint32_t CompactTrace::intern_context(const std::string& compile_context,
                                                           const std::string& user_metadata) {
  if (compile_context == "N/A" && user_metadata.empty()) return 0;
  std::string key = compile_context;
  key.push_back('\0');
  key += user_metadata;
  const auto [it, added] = context_index_.try_emplace(std::move(key), static_cast<std::uint32_t>(contexts_.size()));
  if (added) contexts_.emplace_back(compile_context, user_metadata);
  return it->second;
}

GPUMEMPROF_FUNC Snapshot CompactSnapshot::expand() && {
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

GPUMEMPROF_NAMESPACE_END
