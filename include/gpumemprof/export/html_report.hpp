// Layer 5: the offline HTML report -- one self-contained page (no network, no external script)
// showing a snapshot: summary numbers, the active-memory timeline stacked by allocation (with
// level of detail, so million-entry traces stay responsive), the peak and what was live at it,
// the top allocation sites and the segments with their blocks.
//
// The C++ side does the heavy work once (html_report_model.hpp: intervals, interned stacks,
// peaks) and embeds it as compact columnar JSON (number arrays, delta-coded where values grow,
// plus one string table); the page's script (html_report_assets.hpp) only decodes and draws.
//
//   gmp::write_html_report(gmp::snapshot(), "report.html", {.title = "train step 42"});
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/atomic_file.hpp"
#include "gpumemprof/export/html_report_assets.hpp"
#include "gpumemprof/export/html_report_model.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct HtmlReportOptions {
  /// Shown as the page's title and heading.
  std::string title = "GPU memory report";
  /// Keep only the newest N entries of each device's trace (0 = all). Bounds the file size
  /// (about 15 bytes per entry) for very long histories.
  std::size_t max_trace_entries = 0;
};

namespace detail {

/// Appends compact JSON. Strings are escaped so the text is also safe inside a <script>
/// element (no "</script>", "<!--"); invalid UTF-8 becomes U+FFFD.
class HtmlJsonWriter {
 public:
  explicit HtmlJsonWriter(std::string& out) : out_(out) {}

  void open_object() {
    out_.push_back('{');
    need_comma_ = false;
  }
  void close_object() {
    out_.push_back('}');
    need_comma_ = true;
  }
  void open_array() {
    out_.push_back('[');
    need_comma_ = false;
  }
  void close_array() {
    out_.push_back(']');
    need_comma_ = true;
  }
  /// `"k":` (after a comma when a member precedes it); the value follows.
  void key(std::string_view k) {
    if (need_comma_) out_.push_back(',');
    out_.push_back('"');
    out_.append(k);
    out_.append("\":");
    need_comma_ = true;
  }
  /// Before an element of an array.
  void element() {
    if (need_comma_) out_.push_back(',');
    need_comma_ = true;
  }

  template <class Int>
  void number(Int v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  template <class Int>
  void member(std::string_view k, Int v) {
    key(k);
    number(v);
  }
  /// `"k":[get(x) for x in items]`.
  template <class Items, class Get>
  void column(std::string_view k, const Items& items, Get get) {
    key(k);
    out_.push_back('[');
    bool first = true;
    for (const auto& x : items) {
      if (!first) out_.push_back(',');
      first = false;
      number(get(x));
    }
    out_.push_back(']');
  }
  /// Like column(), each value written as its difference to the previous one (the first to 0):
  /// growing values (states, times, addresses) then take a few digits each.
  template <class Items, class Get>
  void delta_column(std::string_view k, const Items& items, Get get) {
    std::int64_t prev = 0;
    column(k, items, [&](const auto& x) {
      const auto v = static_cast<std::int64_t>(get(x));
      const std::int64_t d = v - prev;
      prev = v;
      return d;
    });
  }

  void string(std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    out_.push_back('"');
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x80) {
        if (c == '"' || c == '\\') {
          out_.push_back('\\');
          out_.push_back(static_cast<char>(c));
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
          out_.append("\\u00");
          out_.push_back(kHex[c >> 4]);
          out_.push_back(kHex[c & 15]);
        } else {
          out_.push_back(static_cast<char>(c));
        }
        ++i;
        continue;
      }
      const std::size_t len = utf8_sequence_length(s, i);
      if (len == 0) {
        out_.append("\\ufffd");
        ++i;
      } else {
        out_.append(s.substr(i, len));
        i += len;
      }
    }
    out_.push_back('"');
  }

 private:
  /// Length of the valid UTF-8 sequence starting at s[i] (a non-ASCII lead byte), else 0.
  static std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return 0;
    }
    if (i + len > s.size()) return 0;
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      const unsigned min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (b < min || b > max) return 0;
    }
    return len;
  }

  std::string& out_;
  bool need_comma_ = false;
};

inline void write_html_device_json(HtmlJsonWriter& w, const HtmlDevice& d) {
  w.open_object();
  w.member("device", d.device);
  w.member("t0", d.t0_us);
  w.member("nEvents", d.times.size());
  w.delta_column("dt", d.times, [](std::int64_t t) { return t; });

  // Allocations: parallel columns; flags are sparse (index, flags pairs).
  using A = HtmlAllocation;
  w.key("alloc");
  w.open_object();
  w.delta_column("start", d.allocations, [](const A& a) { return a.start; });
  w.column("len", d.allocations, [](const A& a) { return a.end - a.start; });
  w.column("size", d.allocations, [](const A& a) { return a.size; });
  w.column("stack", d.allocations, [](const A& a) { return a.stack; });
  w.delta_column("addr", d.allocations, [](const A& a) { return a.addr; });
  std::vector<std::uint64_t> flags;
  for (std::size_t i = 0; i < d.allocations.size(); ++i) {
    if (d.allocations[i].flags != 0) {
      flags.push_back(i);
      flags.push_back(d.allocations[i].flags);
    }
  }
  w.column("flags", flags, [](std::uint64_t v) { return v; });
  w.close_object();

  using Change = std::pair<std::uint64_t, std::int64_t>;
  w.key("reserved");
  w.open_object();
  w.member("start", d.summary.reserved_start_bytes);
  w.column("state", d.reserved_changes, [](const Change& c) { return c.first; });
  w.column("delta", d.reserved_changes, [](const Change& c) { return c.second; });
  w.close_object();
  w.column("ooms", d.ooms, [](std::uint64_t e) { return e; });

  w.key("annotations");
  w.open_object();
  w.column("name", d.annotations, [](const HtmlAnnotation& a) { return a.name; });
  w.column("start", d.annotations, [](const HtmlAnnotation& a) { return a.start ? 1 : 0; });
  w.column("time", d.annotations, [](const HtmlAnnotation& a) { return a.time_us; });
  w.close_object();

  using S = HtmlSegment;
  w.key("segments");
  w.open_object();
  w.column("addr", d.segments, [](const S& s) { return s.address; });
  w.column("size", d.segments, [](const S& s) { return s.total_size; });
  w.column("stream", d.segments, [](const S& s) { return s.stream; });
  w.column("large", d.segments, [](const S& s) { return s.is_large ? 1 : 0; });
  w.column("expandable", d.segments, [](const S& s) { return s.is_expandable ? 1 : 0; });
  w.column("stack", d.segments, [](const S& s) { return s.stack; });
  w.column("nblocks", d.segments, [](const S& s) { return s.num_blocks; });
  w.close_object();

  using B = HtmlBlock;
  w.key("blocks");
  w.open_object();
  w.column("off", d.blocks, [](const B& b) { return b.offset; });
  w.column("size", d.blocks, [](const B& b) { return b.size; });
  w.column("req", d.blocks, [](const B& b) { return b.requested; });
  w.column("state", d.blocks, [](const B& b) { return static_cast<int>(b.state); });  // BlockState order
  w.column("stack", d.blocks, [](const B& b) { return b.stack; });
  w.close_object();

  const HtmlSummary& s = d.summary;
  w.key("summary");
  w.open_object();
  w.member("numEvents", s.num_events);
  w.member("numDroppedEvents", s.num_dropped_events);
  w.member("numAllocs", s.num_allocs);
  w.member("numFrees", s.num_frees);
  w.member("numOoms", s.num_ooms);
  w.member("numSegmentEvents", s.num_segment_events);
  w.member("durationUs", s.duration_us);
  w.member("peakActive", s.peak_active_bytes);
  w.member("peakActiveState", s.peak_active_state);
  w.member("peakAllocated", s.peak_allocated_bytes);
  w.member("peakReserved", s.peak_reserved_bytes);
  w.member("numSegments", s.num_segments);
  w.member("numBlocks", s.num_blocks);
  w.member("numLiveBlocks", s.num_live_blocks);
  w.member("reserved", s.reserved_bytes);
  w.member("allocated", s.allocated_bytes);
  w.member("internalFree", s.internal_free_bytes);
  w.member("externalFree", s.external_free_bytes);
  w.member("pendingFree", s.pending_free_bytes);
  w.member("largestFree", s.largest_free_block);
  w.close_object();
  w.close_object();
}

/// The page's data: {"v", "generator", "title", "strings", "frames" (file, line, name flat),
/// "stacks", "devices"}; read by the script in html_report_assets.hpp.
inline void write_html_model_json(const HtmlModel& m, const HtmlReportOptions& opt, std::string& out) {
  HtmlJsonWriter w(out);
  w.open_object();
  w.member("v", 1);
  w.key("generator");
  w.string("gpumemprof " GPUMEMPROF_VERSION_STRING);
  w.key("title");
  w.string(opt.title);
  w.key("strings");
  w.open_array();
  for (const std::string& s : m.stacks.strings()) {
    w.element();
    w.string(s);
  }
  w.close_array();
  std::vector<std::int64_t> frames;
  frames.reserve(3 * m.stacks.frames().size());
  for (const auto& f : m.stacks.frames()) frames.insert(frames.end(), {f.file, f.line, f.name});
  w.column("frames", frames, [](std::int64_t v) { return v; });
  w.key("stacks");
  w.open_array();
  for (const auto& stack : m.stacks.stacks()) {
    w.element();
    w.open_array();
    for (const std::int32_t f : stack) {
      w.element();
      w.number(f);
    }
    w.close_array();
  }
  w.close_array();
  w.key("devices");
  w.open_array();
  for (const HtmlDevice& d : m.devices) {
    w.element();
    write_html_device_json(w, d);
  }
  w.close_array();
  w.close_object();
}

inline void append_html_escaped(std::string& out, std::string_view s) {
  for (const char c : s) {
    switch (c) {
      case '&': out.append("&amp;"); break;
      case '<': out.append("&lt;"); break;
      case '>': out.append("&gt;"); break;
      case '"': out.append("&quot;"); break;
      default: out.push_back(c);
    }
  }
}

}  // namespace detail

/// The report as one HTML document (UTF-8). Works offline: the page holds its data, styles and
/// script. Handles snapshots without traces (segments only) and traces without frames.
[[nodiscard]] inline std::string render_html_report(const Snapshot& snapshot, const HtmlReportOptions& options = {}) {
  const detail::HtmlModel model = detail::build_html_model(snapshot, options.max_trace_entries);
  std::string out;
  std::size_t entries = 0;
  for (const auto& d : model.devices) entries += d.times.size() + d.allocations.size() + d.blocks.size();
  out.reserve(64 * 1024 + 40 * entries);
  out.append(detail::html_assets::kHead);
  detail::append_html_escaped(out, options.title);
  out.append(detail::html_assets::kStyleAndBody);
  detail::write_html_model_json(model, options, out);
  out.append(detail::html_assets::kScriptOpen);
  for (const std::string_view piece : detail::html_assets::kScript) out.append(piece);
  out.append(detail::html_assets::kTail);
  return out;
}

/// Renders the report and writes it to `path` atomically (temp file + rename). Throws IoError
/// (naming the path and the reason) when it cannot be written; an old file is then left intact.
inline void write_html_report(const Snapshot& snapshot, const std::string& path,
                              const HtmlReportOptions& options = {}) {
  const std::string html = render_html_report(snapshot, options);
  write_file_atomically(path, std::string_view(html));
}

GPUMEMPROF_NAMESPACE_END
