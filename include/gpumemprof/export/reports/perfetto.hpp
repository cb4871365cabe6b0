// Layer 5: a snapshot's memory timeline as Chrome/Perfetto trace-event JSON
// ({"traceEvents": [...]}, open in ui.perfetto.dev or chrome://tracing).
//
// Per device (one process, pid = device index):
//   - counter tracks "requested" (the bytes asked for, PyTorch's requested_bytes: down at
//     free_completed; allocated block bytes are not in a trace) and "reserved" (args
//     {"bytes": N}): the levels of the trace's timeline (analysis/timeline.hpp, the reading
//     every report shares); events sharing a timestamp give one sample.
//   - the external annotations as B/E slices on thread 1 ("annotations"); an END without an
//     open START is dropped, an END closes the slices opened after its START.
//   - out-of-memory events as instant events on thread 0 ("allocator").
// Timestamps ("ts") are microseconds, as the format requires (the snapshot's time_us).
//
// Declarations only; the bodies are in perfetto-inl.hpp (the compiled library has them for
// Snapshot and CompactSnapshot under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <iosfwd>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Writes the trace-event JSON of `snap` (see the header comment) to a stream.
template <SnapshotLike S>
void write_perfetto(const S& snap, std::ostream& out);

/// Writes the trace-event JSON of `snap` to `path` atomically; IoError on failure.
template <SnapshotLike S>
void write_perfetto_file(const S& snap, const std::string& path);

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/reports/perfetto-inl.hpp"
#endif
