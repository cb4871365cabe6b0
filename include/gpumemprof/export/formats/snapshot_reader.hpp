// Layer 5: reading a snapshot file back into a Snapshot -- our pickles and JSON files, and the
// pickles PyTorch writes (torch.cuda.memory._dump_snapshot).
//
// The format is recognised from the content (a pickle starts with PROTO 0x80, JSON with '{'),
// not from the file name. Missing optional keys take defaults (older PyTorch versions omit
// some); keys we do not know are ignored. Anything else wrong -- not a snapshot, a corrupt
// file, a value of the wrong type -- is a FormatError naming the path and the place
// ("snap.pickle: segments[3].blocks[0].size: expected int, found str").
// Frames lists that the file shares (pickle memo) or that are equal end up as one Frames.
//
// A pickle's trace entries are streamed (PickleItemStream): each entry is decoded into a
// CompactTrace as the pickle appends it, and the file is read in chunks, so reading a 10M-entry
// snapshot with load_compact_snapshot() takes about 40 bytes per entry, not a value tree.
//
// Declarations only; the bodies are in snapshot_reader-inl.hpp (the compiled library has them
// under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class DataValue;  // codec/data_value.hpp

/// Converts a value tree in PyTorch's snapshot schema (what read_pickle/parse_json return) to
/// a Snapshot; `name` (a path) starts every error message.
[[nodiscard]] Snapshot snapshot_from_value(const DataValue& root, const std::string& name = "snapshot");

/// Parses snapshot bytes already in memory (a pickle or JSON, recognised from the content) into
/// a CompactSnapshot. Throws FormatError starting with `name` when they are not a readable snapshot.
[[nodiscard]] CompactSnapshot parse_compact_snapshot(std::string_view bytes, const std::string& name = "snapshot");

/// Parses snapshot bytes already in memory: a pickle or JSON, recognised from the content.
/// Throws FormatError starting with `name` when they are not a readable snapshot.
[[nodiscard]] Snapshot parse_snapshot(std::string_view bytes, const std::string& name = "snapshot");

/// Reads the snapshot file at `path` into a CompactSnapshot; a pickle is read in chunks with its
/// trace entries streamed, so memory stays near 40 bytes per entry (JSON is read whole). Throws
/// IoError when the file cannot be read and FormatError (naming the path) when it is not a
/// readable snapshot.
[[nodiscard]] CompactSnapshot load_compact_snapshot(const std::string& path);

/// Reads the snapshot file at `path` (our pickle or JSON, or PyTorch's pickle). Throws IoError
/// when the file cannot be read and FormatError (naming the path and the problem) when it
/// is not a readable snapshot.
[[nodiscard]] Snapshot load_snapshot(const std::string& path);

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/formats/snapshot_reader-inl.hpp"
#endif
