// Layer 5: the profiler's results, samples, summary and tracker events as JSON and CSV.
//
// Each record type lists its fields once (visit_fields below); the JSON writer (nested
// objects) and the CSV writer (flat columns, "memory_before.allocated_memory", ...) are both
// driven by that list, so the two formats cannot disagree. Values that are unavailable --
// allocator fields at device level, a device reading that was not taken -- are null in JSON
// and empty in CSV, never 0. JSON goes through JsonWriter (escaping, UTF-8 repair); CSV follows
// RFC 4180 (fields with a comma, quote or line break are quoted, quotes doubled). Files are
// written atomically.
//
//   gmp::export_results(profiler.results(), "results.csv");   // format from the extension
//   gmp::export_profile(profiler, "profile.json");             // summary + results + samples
//
// Declarations only; the bodies are in profile_export-inl.hpp (the compiled library has them
// under GPUMEMPROF_COMPILED_LIB).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class ExportFormat : unsigned char { json, csv };

/// Results as a JSON array of objects (snapshots nested).
void write_results_json(std::ostream& os, const std::vector<ProfileResult>& results);

/// Results as CSV, one row per result, snapshot fields flattened ("memory_before.allocated_memory").
void write_results_csv(std::ostream& os, const std::vector<ProfileResult>& results);

/// Snapshots (e.g. monitoring samples) as a JSON array.
void write_snapshots_json(std::ostream& os, const std::vector<MemorySnapshot>& snapshots);

void write_snapshots_csv(std::ostream& os, const std::vector<MemorySnapshot>& snapshots);

/// Tracker events as a JSON array (the triggering samples are left out; export them with
/// write_snapshots_* when needed).
void write_events_json(std::ostream& os, const std::vector<TrackingEvent>& events);

void write_events_csv(std::ostream& os, const std::vector<TrackingEvent>& events);

/// Writes `results` to `path` atomically; the format defaults to the file's extension.
void export_results(const std::vector<ProfileResult>& results, const std::string& path,
                    std::optional<ExportFormat> format = std::nullopt);

void export_snapshots(const std::vector<MemorySnapshot>& snapshots, const std::string& path,
                      std::optional<ExportFormat> format = std::nullopt);

void export_events(const std::vector<TrackingEvent>& events, const std::string& path,
                   std::optional<ExportFormat> format = std::nullopt);

/// The summary as one JSON object (function_summaries keyed by name).
void write_summary_json(ValueWriter& w, const ProfileSummary& s);

/// Everything a profiler holds as one JSON document:
/// {"summary": {...}, "results": [...], "snapshots": [...]}, written atomically.
void export_profile(const GPUMemoryProfiler& profiler, const std::string& path);

GPUMEMPROF_NAMESPACE_END

#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/formats/profile_export-inl.hpp"
#endif
