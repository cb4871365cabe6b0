// Analysis layer: request_stream()'s bodies (request_stream.hpp declares them). Included by that
// header in header-only mode; compiled once in the library (lib/analysis.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/compact_snapshot.hpp"
#include "gpumemprof/history/memory_category.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC int busiest_device(const CompactSnapshot& snap) {
  int best = -1;
  std::size_t most = 0;
  for (std::size_t d = 0; d < snap.device_traces.size(); ++d) {
    if (snap.device_traces[d].size() > most) {
      most = snap.device_traces[d].size();
      best = static_cast<int>(d);
    }
  }
  return best;
}

GPUMEMPROF_FUNC RequestStream request_stream(const CompactSnapshot& snap, int device) {
  RequestStream out;
  out.device = device;
  const CompactTrace& trace = snap.device_traces.at(static_cast<std::size_t>(device));
  out.events = trace.size();
  out.requests.reserve(trace.size() / 2);
  std::unordered_map<std::uint64_t, std::uint32_t> streams{{0, 0}};
  std::unordered_map<const void*, std::uint64_t> sites;   // frames list -> site hash
  std::unordered_map<std::uint64_t, std::uint32_t> live;  // address -> request index
  std::uint64_t reserved = 0;
  std::uint64_t requested = 0;
  const std::hash<std::string_view> hash;
  for (std::size_t k = 0; k < trace.size(); ++k) {
    const CompactTrace::Entry e = trace[k];
    switch (e.action) {
      case TraceAction::alloc: {
        ProbeRequest r;
        r.size = e.size;
        r.alloc_event = static_cast<std::uint32_t>(k);
        r.stream = streams.try_emplace(e.stream, static_cast<std::uint32_t>(streams.size())).first->second;
        if (e.frames && !e.frames->empty()) {
          auto [it, fresh] = sites.try_emplace(e.frames.get(), 0);
          if (fresh) {
            std::string label = user_frame_label(e.frames);
            it->second = hash(label) | 1;  // never 0, which means "no stack"
            out.site_labels.try_emplace(it->second, std::move(label));
          }
          r.site = it->second;
        }
        if (const std::string_view cat = category_of_metadata(e.user_metadata); !cat.empty()) {
          r.category = hash(cat) | 1;
          out.category_names.try_emplace(r.category, std::string(cat));
        }
        live[e.addr] = static_cast<std::uint32_t>(out.requests.size());
        out.requests.push_back(r);
        requested += e.size;
        out.peak_requested = std::max(out.peak_requested, requested);
        break;
      }
      case TraceAction::free_completed: {
        const auto it = live.find(e.addr);
        if (it == live.end()) {
          ++out.frees_before_allocs;
          break;
        }
        ProbeRequest& r = out.requests[it->second];
        r.free_event = static_cast<std::uint32_t>(k);
        requested -= r.size;
        live.erase(it);
        break;
      }
      case TraceAction::segment_alloc:
      case TraceAction::segment_map:
        reserved += e.size;
        out.recorded_peak_reserved = std::max(out.recorded_peak_reserved, reserved);
        break;
      case TraceAction::segment_free:
      case TraceAction::segment_unmap: reserved -= std::min(reserved, e.size); break;
      default: break;
    }
  }
  return out;
}

GPUMEMPROF_NAMESPACE_END
