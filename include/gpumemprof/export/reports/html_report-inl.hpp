// The HTML report's bodies (html_report.hpp declares them): included by that header in
// header-only mode; compiled once in the library (lib/reports.cpp, for Snapshot and
// CompactSnapshot) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/codec/html_escape.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/codec/output_buffer.hpp"
#include "gpumemprof/codec/value_columns.hpp"
#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/reports/html_device_bar.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/html_report_assets.hpp"
#include "gpumemprof/export/reports/html_report_lod.hpp"
#include "gpumemprof/export/reports/html_report_model.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/export/reports/step_summary.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// The level of detail's data: "lod": {events, allocations, liveAtEnd, hidden, ev (the trace
/// state of each page state, delta-coded; absent when they are the same), active, sites}.
inline void write_html_lod_json(ValueWriter& w, const HtmlLevelOfDetail& lod, std::size_t page_events) {
  w.key("lod");
  w.begin_dict();
  w.field("events", lod.events);
  w.field("allocations", lod.allocations);
  w.field("liveAtEnd", lod.live_at_end);
  w.field("hidden", lod.hidden);
  if (page_events != lod.events) write_delta_column(w, "ev", lod.state_event, [](std::uint64_t s) { return s; });
  write_column(w, "active", lod.active, [](std::uint64_t b) { return b; });
  using Site = HtmlLevelOfDetail::Site;
  w.key("sites");
  w.begin_dict();
  write_column(w, "stack", lod.sites, [](const Site& x) { return x.stack; });
  write_column(w, "count", lod.sites, [](const Site& x) { return x.count; });
  write_column(w, "total", lod.sites, [](const Site& x) { return x.total; });
  write_column(w, "live", lod.sites, [](const Site& x) { return x.live; });
  write_column(w, "peak", lod.sites, [](const Site& x) { return x.peak; });
  write_column(w, "largest", lod.sites, [](const Site& x) { return x.largest; });
  w.end_dict();
  w.end_dict();
}

inline void write_html_device_json(ValueWriter& w, const HtmlDevice& d) {
  w.begin_dict();
  w.field("device", d.device);
  w.field("name", d.name);
  w.field("t0", d.t0_us);
  w.field("nEvents", d.times.size());
  write_delta_column(w, "dt", d.times, [](std::int64_t t) { return t; });

  // Allocations: parallel columns; flags are sparse (index, flags pairs).
  using A = HtmlAllocation;
  w.key("alloc");
  w.begin_dict();
  write_delta_column(w, "start", d.allocations, [](const A& a) { return a.start; });
  write_column(w, "len", d.allocations, [](const A& a) { return a.end - a.start; });
  write_column(w, "size", d.allocations, [](const A& a) { return a.size; });
  write_column(w, "stack", d.allocations, [](const A& a) { return a.stack; });
  write_delta_column(w, "addr", d.allocations, [](const A& a) { return a.addr; });
  std::vector<std::uint64_t> flags;
  for (std::size_t i = 0; i < d.allocations.size(); ++i) {
    if (d.allocations[i].flags != 0) {
      flags.push_back(i);
      flags.push_back(d.allocations[i].flags);
    }
  }
  write_column(w, "flags", flags, [](std::uint64_t v) { return v; });
  w.end_dict();

  using Change = std::pair<std::uint64_t, std::int64_t>;
  w.key("reserved");
  w.begin_dict();
  w.field("start", d.summary.reserved_start_bytes);
  write_column(w, "state", d.reserved_changes, [](const Change& c) { return c.first; });
  write_column(w, "delta", d.reserved_changes, [](const Change& c) { return c.second; });
  w.end_dict();
  write_column(w, "ooms", d.ooms, [](std::uint64_t e) { return e; });

  w.key("annotations");
  w.begin_dict();
  write_column(w, "name", d.annotations, [](const HtmlAnnotation& a) { return a.name; });
  write_column(w, "start", d.annotations, [](const HtmlAnnotation& a) { return a.start ? 1 : 0; });
  write_column(w, "time", d.annotations, [](const HtmlAnnotation& a) { return a.time_us; });
  w.end_dict();

  using S = HtmlSegment;
  w.key("segments");
  w.begin_dict();
  write_column(w, "addr", d.segments, [](const S& s) { return s.address; });
  write_column(w, "size", d.segments, [](const S& s) { return s.total_size; });
  write_column(w, "stream", d.segments, [](const S& s) { return s.stream; });
  write_column(w, "large", d.segments, [](const S& s) { return s.is_large ? 1 : 0; });
  write_column(w, "expandable", d.segments, [](const S& s) { return s.is_expandable ? 1 : 0; });
  write_column(w, "stack", d.segments, [](const S& s) { return s.stack; });
  write_column(w, "nblocks", d.segments, [](const S& s) { return s.num_blocks; });
  // segment_pool_id, as two columns: (poolFirst[i], poolSecond[i]).
  write_column(w, "poolFirst", d.segments, [](const S& s) { return s.pool.first; });
  write_column(w, "poolSecond", d.segments, [](const S& s) { return s.pool.second; });
  w.end_dict();

  using B = HtmlBlock;
  w.key("blocks");
  w.begin_dict();
  write_column(w, "off", d.blocks, [](const B& b) { return b.offset; });
  write_column(w, "size", d.blocks, [](const B& b) { return b.size; });
  write_column(w, "req", d.blocks, [](const B& b) { return b.requested; });
  write_column(w, "state", d.blocks, [](const B& b) { return static_cast<int>(b.state); });  // BlockState order
  write_column(w, "stack", d.blocks, [](const B& b) { return b.stack; });
  w.end_dict();

  const HtmlSummary& s = d.summary;
  w.key("summary");
  w.begin_dict();
  w.field("numEvents", s.num_events);
  w.field("numDroppedEvents", s.num_dropped_events);
  w.field("numAllocs", s.num_allocs);
  w.field("numFrees", s.num_frees);
  w.field("numOoms", s.num_ooms);
  w.field("numSegmentEvents", s.num_segment_events);
  w.field("durationUs", s.duration_us);
  w.field("activeSlices", s.active_slices);
  w.field("openOnEvents", s.opens_on_events);
  // Named as analysis/timeline.hpp names the levels.
  w.field("peakRequested", s.peak_requested_bytes);
  w.field("peakRequestedState", s.peak_requested_state);
  w.field("peakRequestedInUse", s.peak_requested_in_use_bytes);
  // -1: the trace could not be replayed (the card says n/a).
  w.field("peakAllocated", s.peak_allocated_bytes ? static_cast<std::int64_t>(*s.peak_allocated_bytes) : -1);
  w.field("peakReserved", s.peak_reserved_bytes);
  w.field("numSegments", s.num_segments);
  w.field("numBlocks", s.num_blocks);
  const SegmentFacts& u = s.usage;
  w.field("numLiveBlocks", u.live_blocks);
  w.field("reserved", u.reserved);
  w.field("requested", u.requested);  // what the live blocks' callers asked for
  w.field("internalFree", u.internal_free());
  w.field("externalFree", u.unallocated());
  w.field("pendingFree", u.pending);
  w.field("largestFree", u.largest_free);
  // External fragmentation by the one definition; -1 when undefined (nothing free or nothing live).
  w.field("extFrag", s.usage.external_fragmentation().value_or(-1.0));
  w.end_dict();
  if (d.lod.applied) write_html_lod_json(w, d.lod, d.times.size());
  w.end_dict();
}

/// The page's data: {"v", "generator", "title", "strings", "frames" (file, line, name flat),
/// "stacks", "devices"}; read by the report's scripts (web/report-*.js).
inline void write_html_model_json(const HtmlModel& m, const HtmlReportOptions& opt, ValueWriter& w) {
  w.begin_dict();
  w.field("v", 1);
  w.field("generator", "gpumemprof " GPUMEMPROF_VERSION_STRING);
  w.field("title", opt.title);
  w.key("strings");
  w.begin_list();
  for (const std::string& s : m.stacks.strings()) w.value(s);
  w.end_list();
  std::vector<std::int64_t> frames;
  frames.reserve(3 * m.stacks.frames().size());
  for (const auto& f : m.stacks.frames()) frames.insert(frames.end(), {f.file, f.line, f.name});
  write_column(w, "frames", frames, [](std::int64_t v) { return v; });
  w.key("stacks");
  w.begin_list();
  for (const auto& stack : m.stacks.stacks()) {
    w.begin_list();
    for (const std::int32_t f : stack) w.value(f);
    w.end_list();
  }
  w.end_list();
  w.key("devices");
  w.begin_list();
  for (const HtmlDevice& d : m.devices) write_html_device_json(w, d);
  w.end_list();
  w.end_dict();
}

}  // namespace detail

template <SnapshotLike S>
void write_html_report(const S& snapshot, std::ostream& os, const HtmlReportOptions& options) {
  detail::HtmlModel model = detail::build_html_model(snapshot, options.max_trace_entries);
  for (detail::HtmlDevice& dev : model.devices)
    detail::apply_html_level_of_detail(dev, options.max_page_states, options.max_page_allocations);
  std::string head;
  for (const std::string_view piece : detail::html_assets::kHead) head += piece;
  detail::append_html_escaped(head, options.title);
  // The page's cards (the device section after the summary cards), then memory by category
  // (memory_timeline.hpp) for each device with a trace, then the steps (step_summary.hpp).
  std::string body;
  for (const std::string_view piece : detail::html_assets::kBeforeData) body += piece;
  if constexpr (requires { snapshot.device_memory; }) {
    std::size_t at = body.find("<section class=\"card\" id=\"tl-card\">");
    if (at == std::string::npos) at = body.find("</main>");
    if (at != std::string::npos) body.insert(at, detail::html_device_section(snapshot.device_memory));
  }
  const std::size_t main_end = body.find("</main>");
  head.append(body, 0, main_end);
  for (const detail::HtmlDevice& dev : model.devices) {
    const auto d = static_cast<std::size_t>(dev.device);
    if (d >= snapshot.device_traces.size() || snapshot.device_traces[d].empty()) continue;
    head += "<section class=\"card\" id=\"cat-card-" + std::to_string(dev.device) +
            "\"><div class=\"card-head\"><h2>Memory by category, device " + std::to_string(dev.device) +
            "</h2></div><p class=\"hint\">Requested bytes in use (from alloc to free requested) by "
            "category; below it the annotated ranges and, on their own row, the steps.</p>";
    head += memory_timeline_svg(snapshot, dev.device);
    head += "</section>";
  }
  if (const std::vector<StepReport> steps = snapshot_steps(snapshot); !steps.empty()) head += steps_html(steps);
  head.append(body, main_end);
  detail::write_bytes(os, head.data(), head.size());
  JsonWriter w(os, JsonWriterOptions{.script_safe = true});
  detail::write_html_model_json(model, options, w);
  w.finish();
  for (const std::string_view piece : detail::html_assets::kAfterData) os << piece;
  os.flush();
  if (!os) throw IoError("writing the HTML report failed");
}

template <SnapshotLike S>
std::string render_html_report(const S& snapshot, const HtmlReportOptions& options) {
  std::ostringstream os;
  write_html_report(snapshot, os, options);
  return std::move(os).str();
}

template <SnapshotLike S>
void write_html_report(const S& snapshot, const std::string& path, const HtmlReportOptions& options) {
  write_file_atomically(path, [&](std::ostream& os) { write_html_report(snapshot, os, options); });
}

GPUMEMPROF_NAMESPACE_END
