// Layer 5: the HTML report's device section -- one bar per device splitting its whole capacity
// into live blocks, cached blocks, each external owner, module code, the CUDA context, what is
// unattributed and what is free, with a table of the same numbers. Static HTML (no script), so it
// reads the same in any browser; shown only for snapshots that carry the device's memory (ours).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/codec/html_escape.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// One part of the device bar.
struct DevicePart {
  std::string label;
  std::uint64_t bytes = 0;
  const char* color = "";
  std::string note;
  std::vector<std::string> stack;  ///< an owner's top site's C++ stack, when recorded
};

/// The parts of `m`'s bar, in drawing order; zero-byte parts are left out.
[[nodiscard]] inline std::vector<DevicePart> device_bar_parts(const DeviceMemory& m) {
  static constexpr const char* kOwnerColors[] = {"#d9822b", "#c0392b", "#8e44ad", "#b7950b", "#a04000", "#7d3c98"};
  std::vector<DevicePart> parts;
  auto add = [&parts](std::string label, std::uint64_t bytes, const char* color, std::string note = {},
                      std::vector<std::string> stack = {}) {
    if (bytes != 0) parts.push_back(DevicePart{std::move(label), bytes, color, std::move(note), std::move(stack)});
  };
  add("live (allocated)", m.allocated, "#2e86c1");
  add("cached (reserved, not allocated)", m.reserved - std::min(m.reserved, m.allocated), "#85c1e9");
  for (std::size_t i = 0; i < m.external_by_owner.size(); ++i) {
    const OwnerMemory& o = m.external_by_owner[i];
    add(o.owner, o.bytes, kOwnerColors[i % std::size(kOwnerColors)],
        std::to_string(o.count) + (o.count == 1 ? " allocation" : " allocations") +
            most_from(o),
        o.top_stack);
  }
  add("module code", m.code, "#7f8c8d");
  add("CUDA context", m.context, "#566573");
  if (m.unattributed > 0) add("unattributed", static_cast<std::uint64_t>(m.unattributed), "#f1948a");
  add("free", m.total - std::min(m.total, m.used), "#eef2f5");
  return parts;
}

/// The section for the devices of a snapshot; "" when it carries none.
[[nodiscard]] inline std::string html_device_section(const std::vector<DeviceMemory>& devices) {
  if (devices.empty()) return {};
  std::string out =
      "<section class=\"card\" id=\"device-card\">\n<div class=\"card-head\"><h2>The whole device</h2></div>\n"
      "<p class=\"hint\">The device's capacity as the driver counts it: the allocator's live and cached blocks, "
      "allocations made outside it (by the library that made them), module code, the CUDA context, and what "
      "none of these explains.</p>\n";
  char pct[32];
  for (const DeviceMemory& m : devices) {
    out += "<h3>";
    append_html_escaped(out, m.device);
    out += ": " + format_size(m.used) + " used of " + format_size(m.total) + "</h3>\n<div class=\"fragbar devbar\">";
    const std::vector<DevicePart> parts = device_bar_parts(m);
    for (const DevicePart& p : parts) {
      std::snprintf(pct, sizeof pct, "%.3f",
                    m.total == 0 ? 0.0 : 100.0 * static_cast<double>(p.bytes) / static_cast<double>(m.total));
      out += "<div style=\"width:" + std::string(pct) + "%;background:" + p.color + "\" title=\"";
      append_html_escaped(out, p.label + " " + format_size(p.bytes));
      out += "\"></div>";
    }
    out += "</div>\n<table class=\"devtable\"><tr><th>part</th><th>bytes</th><th></th></tr>\n";
    for (const DevicePart& p : parts) {
      out += "<tr><td><span style=\"display:inline-block;width:10px;height:10px;background:" + std::string(p.color) +
             "\"></span> ";
      append_html_escaped(out, p.label);
      out += "</td><td>" + format_size(p.bytes) + "</td><td>";
      append_html_escaped(out, p.note);
      if (!p.stack.empty()) {
        out += "<pre style=\"margin:2px 0;font-size:11px\">";
        for (const std::string& frame : p.stack) {
          append_html_escaped(out, frame);
          out += "\n";
        }
        out += "</pre>";
      }
      out += "</td></tr>\n";
    }
    if (m.unattributed < 0) {
      out += "<tr><td>unattributed</td><td>-" + format_size(static_cast<std::uint64_t>(-m.unattributed)) +
             "</td><td>the driver's count lags what was recorded</td></tr>\n";
    }
    out += "</table>\n";
    if (!m.tracking) {
      out +=
          "<p class=\"hint\">Allocations outside the allocator were not tracked: call "
          "gmp::track_external_memory() early in main, or set GPUMEMPROF_TRACK_EXTERNAL=1.</p>\n";
    }
  }
  out += "</section>\n";
  return out;
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
