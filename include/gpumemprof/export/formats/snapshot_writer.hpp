// Layer 5: a Snapshot in PyTorch's schema (torch.cuda.memory._snapshot()), as a pickle that
// pytorch.org/memory_viz and torch.cuda._memory_viz read, or as the same data in JSON.
//
// Key names and their order follow what PyTorch 2.11 writes (see docs/pytorch-compat.md and
// tests/data/resnet50_train.snapshot.pickle): segments carry segment_pool_id (0, 0) and
// is_expandable, trace entries compile_context and user_metadata, the oom entry device_free
// in place of addr, annotations stage "START"/"END". A frames list shared by many entries
// (one Frames pointer) is written once and referenced through the pickle memo, as are the
// repeated action/state names and the file and function names that many distinct stacks share
// (a replayed trace's frames: one stack per line, all in one file).
//
// Declarations only; the bodies are in snapshot_writer-inl.hpp (the compiled library has them
// under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The file formats of a snapshot.
enum class SnapshotFormat : std::uint8_t {
  pickle,  ///< PyTorch's format (protocol 4), for the memory viewers
  json,    ///< the same data as JSON (tuples as arrays)
};

/// Writes `snap` as one value (a dict in PyTorch's schema) through any ValueWriter; the
/// caller calls finish(). Throws std::invalid_argument from a PickleWriter when a number
/// exceeds 2^53.
void write_snapshot(const Snapshot& snap, ValueWriter& w);

/// Writes `snap` to a stream as a pickle (protocol 4) or JSON.
void write_snapshot(const Snapshot& snap, std::ostream& out, SnapshotFormat format = SnapshotFormat::pickle);

/// The format a snapshot path asks for: ".json" (any case) is JSON, anything else a pickle.
[[nodiscard]] inline SnapshotFormat snapshot_format_for(std::string_view path) noexcept {
  constexpr std::string_view kJson = ".json";
  if (path.size() < kJson.size()) return SnapshotFormat::pickle;
  const std::string_view tail = path.substr(path.size() - kJson.size());
  for (std::size_t i = 0; i < kJson.size(); ++i) {
    char c = tail[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kJson[i]) return SnapshotFormat::pickle;
  }
  return SnapshotFormat::json;
}

/// Writes `snap` to the file at `path` atomically, in the format its extension asks for
/// (snapshot_format_for). Throws IoError naming the path and the reason on failure, leaving
/// any old file intact.
void write_snapshot_file(const Snapshot& snap, const std::string& path);

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/formats/snapshot_writer-inl.hpp"
#endif
