// Analysis layer: the segment facts' bodies (memory_facts.hpp declares them). Included by that
// header in header-only mode; compiled once in the library (lib/analysis.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC SegmentFacts segment_facts(const SnapshotSegment& seg) {
  return segment_facts(seg.total_size, seg.blocks);
}

GPUMEMPROF_FUNC SegmentFacts segment_facts(const SegmentView& seg) { return segment_facts(seg.size, seg.blocks); }

GPUMEMPROF_FUNC SegmentFacts snapshot_facts(const Snapshot& snap, int device) {
  SegmentFacts u;
  for (const SnapshotSegment& seg : snap.segments) {
    if (device < 0 || seg.device == device) u += segment_facts(seg);
  }
  return u;
}

GPUMEMPROF_FUNC std::string format_fraction(std::optional<double> f) {
  if (!f) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * *f);
  return buf;
}

GPUMEMPROF_NAMESPACE_END
