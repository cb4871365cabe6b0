// The profile exporters' bodies (profile_export.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/reports.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/formats/profile_export.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// "func at file:line; func at file:line" (innermost first); empty without frames.
[[nodiscard]] inline std::string frames_text(const Frames& frames) {
  std::string out;
  if (frames == nullptr) return out;
  for (const Frame& f : *frames) {
    if (!out.empty()) out += "; ";
    out += frame_label(f);
  }
  return out;
}

// visit_fields(record, v): v.field(key, value, present) per scalar field, and
// v.nested(key, snapshot) per embedded snapshot. `present == false` means unavailable.

template <class V>
void visit_fields(const MemorySnapshot& s, V& v) {
  const bool a = s.allocator_level;
  v.field("timestamp", s.timestamp, true);
  v.field("operation", std::string_view(s.operation), true);
  v.field("device_id", std::int64_t{s.device_id}, true);
  v.field("allocator_level", s.allocator_level, true);
  v.field("allocated_memory", s.allocated_memory, a);
  v.field("reserved_memory", s.reserved_memory, a);
  v.field("active_memory", s.active_memory, a);
  v.field("inactive_memory", s.inactive_memory, a);
  v.field("cpu_memory", s.cpu_memory, true);
  v.field("device_used_memory", s.device_used_memory.value_or(0), s.device_used_memory.has_value());
  v.field("device_total_memory", s.device_total_memory.value_or(0), s.device_total_memory.has_value());
  v.field("external_memory", s.external_memory.value_or(0), s.external_memory.has_value());
  v.field("stack_trace", std::string_view(frames_text(s.stack_trace)), s.stack_trace != nullptr);
}

template <class V>
void visit_fields(const ProfileResult& r, V& v) {
  const bool a = r.allocator_level;
  v.field("name", std::string_view(r.name), true);
  v.field("execution_time", r.execution_time, true);
  v.field("memory_allocated", r.memory_allocated, a);
  v.field("memory_freed", r.memory_freed, a);
  v.field("memory_diff", r.memory_diff(), true);
  v.field("peak_memory_usage", r.peak_memory_usage(), true);
  v.field("tensors_created", r.tensors_created, a);
  v.field("tensors_deleted", r.tensors_deleted, a);
  v.field("depth", std::int64_t{r.depth}, true);  // profiled scopes it ran inside (0: outermost)
  v.field("allocator_level", r.allocator_level, true);
  v.field("exception_message", std::string_view(r.exception_message.value_or("")), r.exception_message.has_value());
  v.nested("memory_before", r.memory_before);
  v.nested("memory_after", r.memory_after);
  v.nested("memory_peak", r.memory_peak);
}

template <class V>
void visit_fields(const TrackingEvent& e, V& v) {
  v.field("timestamp", e.timestamp, true);
  v.field("event_type", std::string_view(to_string(e.type)), true);
  v.field("alert", std::string_view(to_string(e.alert)), e.alert != AlertKind::none);
  v.field("memory_allocated", e.memory_allocated, true);
  v.field("memory_reserved", e.memory_reserved, e.sample.allocator_level);
  v.field("memory_change", e.memory_change, true);
  v.field("device_id", std::int64_t{e.device_id}, true);
  v.field("message", std::string_view(e.message), true);
  v.field("value", e.value, e.alert != AlertKind::none);
  v.field("threshold", e.threshold, e.alert != AlertKind::none);
}

/// Writes visited fields as one JSON object.
class JsonFields {
 public:
  explicit JsonFields(ValueWriter& w) : w_(w) {}
  template <class T>
  void field(std::string_view key, const T& value, bool present) {
    w_.key(key);
    if (present) {
      w_.value(value);
    } else {
      w_.value(nullptr);
    }
  }
  template <class R>
  void nested(std::string_view key, const R& record) {
    w_.key(key);
    write(record);
  }
  template <class R>
  void write(const R& record) {
    w_.begin_dict();
    visit_fields(record, *this);
    w_.end_dict();
  }

 private:
  ValueWriter& w_;
};

/// Collects the CSV column names of a record type (nested records flattened with "key.").
class CsvHeader {
 public:
  template <class T>
  void field(std::string_view key, const T& /*value*/, bool /*present*/) {
    names.push_back(prefix_ + std::string(key));
  }
  template <class R>
  void nested(std::string_view key, const R& record) {
    const std::string saved = prefix_;
    prefix_ += std::string(key) + ".";
    visit_fields(record, *this);
    prefix_ = saved;
  }
  std::vector<std::string> names;

 private:
  std::string prefix_;
};

/// Appends one RFC 4180 field.
inline void append_csv_field(std::string& line, std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
    line.append(text);
    return;
  }
  line.push_back('"');
  for (const char c : text) {
    if (c == '"') line.push_back('"');
    line.push_back(c);
  }
  line.push_back('"');
}

/// Writes visited fields as one CSV row.
class CsvRow {
 public:
  template <class T>
  void field(std::string_view /*key*/, const T& value, bool present) {
    if (!first_) line.push_back(',');
    first_ = false;
    if (!present) return;
    if constexpr (std::is_same_v<T, std::string_view>) {
      append_csv_field(line, value);
    } else if constexpr (std::is_same_v<T, bool>) {
      line.append(value ? "true" : "false");
    } else {
      char buf[32];
      const auto res = std::to_chars(buf, buf + sizeof buf, value);
      line.append(buf, res.ptr);
    }
  }
  template <class R>
  void nested(std::string_view /*key*/, const R& record) {
    visit_fields(record, *this);
  }
  std::string line;

 private:
  bool first_ = true;
};

template <class R>
void write_json_records(std::ostream& os, const std::vector<R>& records) {
  JsonWriter w(os);
  JsonFields fields(w);
  w.begin_list();
  for (const R& r : records) fields.write(r);
  w.end_list();
  w.finish();
}

template <class R>
void write_csv_records(std::ostream& os, const std::vector<R>& records) {
  CsvHeader header;
  visit_fields(R{}, header);
  std::string line;
  for (const std::string& name : header.names) {
    if (!line.empty()) line.push_back(',');
    append_csv_field(line, name);
  }
  line += "\r\n";  // RFC 4180 line ends
  os << line;
  for (const R& r : records) {
    CsvRow row;
    visit_fields(r, row);
    row.line += "\r\n";
    os << row.line;
  }
  if (!os) throw IoError("writing CSV to the output stream failed");
}

/// The format a file name asks for: ".csv" -> CSV, ".json" -> JSON; else std::invalid_argument.
[[nodiscard]] inline ExportFormat format_of(const std::string& path) {
  const auto ends_with = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends_with(".csv")) return ExportFormat::csv;
  if (ends_with(".json")) return ExportFormat::json;
  throw std::invalid_argument("cannot tell the export format of '" + path +
                              "': name it .json or .csv, or pass the format");
}

template <class R>
void export_records(const std::vector<R>& records, const std::string& path, std::optional<ExportFormat> format) {
  const ExportFormat f = format ? *format : format_of(path);
  write_file_atomically(path, [&](std::ostream& os) {
    if (f == ExportFormat::json) {
      write_json_records(os, records);
    } else {
      write_csv_records(os, records);
    }
  });
}

}  // namespace detail

GPUMEMPROF_FUNC void write_results_json(std::ostream& os, const std::vector<ProfileResult>& results) {
  detail::write_json_records(os, results);
}
GPUMEMPROF_FUNC void write_results_csv(std::ostream& os, const std::vector<ProfileResult>& results) {
  detail::write_csv_records(os, results);
}
GPUMEMPROF_FUNC void write_snapshots_json(std::ostream& os, const std::vector<MemorySnapshot>& snapshots) {
  detail::write_json_records(os, snapshots);
}
GPUMEMPROF_FUNC void write_snapshots_csv(std::ostream& os, const std::vector<MemorySnapshot>& snapshots) {
  detail::write_csv_records(os, snapshots);
}
GPUMEMPROF_FUNC void write_events_json(std::ostream& os, const std::vector<TrackingEvent>& events) {
  detail::write_json_records(os, events);
}
GPUMEMPROF_FUNC void write_events_csv(std::ostream& os, const std::vector<TrackingEvent>& events) {
  detail::write_csv_records(os, events);
}

GPUMEMPROF_FUNC void export_results(const std::vector<ProfileResult>& results, const std::string& path,
                                    std::optional<ExportFormat> format) {
  detail::export_records(results, path, format);
}
GPUMEMPROF_FUNC void export_snapshots(const std::vector<MemorySnapshot>& snapshots, const std::string& path,
                                      std::optional<ExportFormat> format) {
  detail::export_records(snapshots, path, format);
}
GPUMEMPROF_FUNC void export_events(const std::vector<TrackingEvent>& events, const std::string& path,
                                   std::optional<ExportFormat> format) {
  detail::export_records(events, path, format);
}

GPUMEMPROF_FUNC void write_summary_json(ValueWriter& w, const ProfileSummary& s) {
  const bool a = s.allocator_level;
  detail::JsonFields maybe(w);  // allocation totals are null at device level
  w.begin_dict();
  w.field("device", s.device);
  w.field("allocator_level", s.allocator_level);
  w.field("total_functions_profiled", s.total_functions_profiled);
  w.field("total_function_calls", s.total_function_calls);
  w.field("total_execution_time", s.total_execution_time);
  maybe.field("total_memory_allocated", s.total_memory_allocated, a);
  maybe.field("total_memory_freed", s.total_memory_freed, a);
  w.field("net_memory_change", s.net_memory_change);
  w.field("peak_memory_usage", s.peak_memory_usage);
  w.field("current_memory_usage", s.current_memory_usage);
  w.field("baseline_memory_usage", s.baseline_memory_usage);
  w.field("memory_change_from_baseline", s.memory_change_from_baseline);
  w.field("monitoring_active", s.monitoring_active);
  w.field("snapshots_collected", s.snapshots_collected);
  w.field("results_dropped", s.results_dropped);
  w.key("function_summaries");
  w.begin_dict();
  for (const auto& [name, f] : s.function_summaries) {
    w.key(name);
    w.begin_dict();
    w.field("call_count", f.call_count);
    w.field("total_time", f.total_time);
    w.field("avg_time", f.avg_time);
    maybe.field("total_memory_allocated", f.total_memory_allocated, a);
    maybe.field("avg_memory_allocated", f.avg_memory_allocated, a);
    w.field("peak_memory", f.peak_memory);
    w.field("net_memory_change", f.net_memory_change);
    w.field("exceptions", f.exceptions);
    w.end_dict();
  }
  w.end_dict();
  w.end_dict();
}

GPUMEMPROF_FUNC void export_profile(const GPUMemoryProfiler& profiler, const std::string& path) {
  const ProfileSummary summary = profiler.get_summary();
  const std::vector<ProfileResult> results = profiler.results();
  const std::vector<MemorySnapshot> samples = profiler.snapshots();
  write_file_atomically(path, [&](std::ostream& os) {
    JsonWriter w(os);
    detail::JsonFields fields(w);
    w.begin_dict();
    w.key("summary");
    write_summary_json(w, summary);
    w.key("results");
    w.begin_list();
    for (const auto& r : results) fields.write(r);
    w.end_list();
    w.key("snapshots");
    w.begin_list();
    for (const auto& s : samples) fields.write(s);
    w.end_list();
    w.end_dict();
    w.finish();
  });
}

GPUMEMPROF_NAMESPACE_END
