// Analysis layer: the OOM report's bodies (oom_report.hpp declares them): its text and the
// report built from what the allocator held at the OOM. Included by that header in header-only
// mode; compiled once in the library (lib/analysis.cpp) for GPUMEMPROF_COMPILED_LIB programs.
// Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/analysis/oom_report.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC std::string OomReport::to_string(std::size_t max_segments, std::size_t max_frames) const {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  line("Out of memory on " + device_name + ": a request of " + format_size(info.requested_bytes) + " (a " +
       format_size(block_bytes) + " block, " + (small_pool ? "small" : "large") + " pool) needed a new " +
       format_size(info.allocation_bytes) + " segment; the device has " + format_size(info.device_free) + " free of " +
       format_size(info.device_total) + ".");
  if (const std::string others = describe_outside_allocator(device); !others.empty()) {
    line("Out of memory with " + format_size(info.reserved_bytes) + " reserved of " + format_size(device.total) + ": " +
         others + ".");
  }
  for (const OwnerMemory& o : device.external_by_owner) {  // stacks: track_external_memory({.stacks = true})
    if (o.top_stack.empty()) continue;
    line("  " + o.owner + " holds " + format_size(o.bytes) + ", most from:");
    out += format_top_stack(o, "      ", max_frames);
  }
  std::string why;
  switch (cause) {
    case OomCause::fragmentation:
      why = format_size(reserved_unallocated) + " is reserved but unallocated, yet the largest free block is " +
            format_size(usage.largest_free) + " (external fragmentation " +
            format_fraction(usage.external_fragmentation()) +
            "): the free memory is split into pieces. Try "
            "GPUMEMPROF_ALLOC_CONF=expandable_segments:True or max_split_size_mb, or allocate "
            "long-lived buffers first.";
      break;
    case OomCause::memory_fraction:
      why = "the per-process memory fraction allows " + format_size(info.device_total) + "; this allocator reserves " +
            format_size(info.reserved_bytes) + ".";
      break;
    case OomCause::device_full:
      why = format_size(info.allocated_bytes) + " is allocated, " + format_size(reserved_unallocated) +
            " more is cached, and " + format_size(not_ours_bytes) +
            " is used outside this allocator: the live allocations below need the memory.";
      break;
  }
  line(std::string("Cause: ") + gpumemprof::to_string(cause) + " -- " + why);
  line("Reserved " + format_size(info.reserved_bytes) + " = allocated " + format_size(info.allocated_bytes) +
       " + free in cached blocks " + format_size(usage.free) +
       (usage.pending != 0 ? " + pending free " + format_size(usage.pending) : std::string()) +
       ". Largest free block: " + format_size(usage.largest_free) + " (needed " + format_size(block_bytes) + ").");
  if (!segments.empty()) {
    line("Segments with the most free memory:");
    for (std::size_t i = 0; i < segments.size() && i < max_segments; ++i) {
      const SegmentUsage& s = segments[i];
      char addr[32];
      std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(s.address));
      const SegmentFacts& u = s.facts;
      line(std::string("  ") + addr + " " + format_size(u.reserved) + (s.is_large ? " large" : " small") + ", stream " +
           std::to_string(s.stream) + ": " + format_size(u.allocated) + " allocated, " + format_size(u.free) +
           " free in " + std::to_string(u.free_blocks) + " " + plural(u.free_blocks, "block") + " (largest " +
           format_size(u.largest_free) + ")" + (u.pending != 0 ? ", " + format_size(u.pending) + " pending free" : ""));
    }
  }
  if (!top_sites.empty()) {
    line(stacks_recorded ? "Live allocations by call site:"
                         : "Live allocations (record_memory_history for call sites):");
    for (const AllocationSite& site : top_sites) {
      line("  " + format_size(site.bytes) + " in " + std::to_string(site.count) + " " + plural(site.count, "block") +
           (site.frames == nullptr || site.frames->empty() ? std::string(" (no stack)") : std::string(" from:")));
      if (site.frames == nullptr) continue;
      for (std::size_t f = 0; f < site.frames->size() && f < max_frames; ++f) {
        const Frame& fr = (*site.frames)[f];
        line("      " + frame_label(fr));
      }
    }
  }
  return out;
}

GPUMEMPROF_FUNC std::optional<OomReport> OomReporter::last() const {
  std::lock_guard lock(mutex_);
  return last_;
}

GPUMEMPROF_FUNC std::size_t OomReporter::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

GPUMEMPROF_FUNC void OomReporter::add(OomReport report) {
  std::lock_guard lock(mutex_);
  last_ = std::move(report);
  ++count_;
}

namespace detail {

GPUMEMPROF_FUNC OomReport make_oom_report(const OomInfo& info, OomReportInput input, std::size_t top_sites) {
  OomReport r;
  r.info = info;
  r.device_name = std::move(input.device_name);
  r.block_bytes = input.block_bytes;
  r.small_pool = is_small_size(r.block_bytes);
  r.reserved_unallocated = info.reserved_bytes - std::min(info.reserved_bytes, info.allocated_bytes);
  // info.device_total is the allowed maximum under a memory fraction; the device tells its own.
  const std::uint64_t real_total = std::max<std::uint64_t>(input.device_total, info.device_total);
  const bool capped = info.device_total < real_total;
  const std::uint64_t device_used = real_total - std::min<std::uint64_t>(real_total, info.device_free);
  r.not_ours_bytes = device_used - std::min<std::uint64_t>(device_used, info.reserved_bytes);
  r.device = std::move(input.device);

  std::map<std::uint64_t, AllocationSite> sites;  // by context handle (one per stack)
  for (const SegmentView& v : input.segments) {
    const SegmentUsage& s = r.segments.emplace_back(SegmentUsage{v.address, v.stream.id, v.is_large, segment_facts(v)});
    r.usage += s.facts;
    for (const BlockView& b : v.blocks) {
      if (b.state != BlockState::active_allocated) continue;
      AllocationSite& site = sites[b.context];
      site.bytes += b.size;
      site.requested_bytes += b.requested_size;
      ++site.count;
    }
  }
  std::stable_sort(r.segments.begin(), r.segments.end(),
                   [](const SegmentUsage& a, const SegmentUsage& b) { return a.facts.free > b.facts.free; });

  // Why: free memory in the wrong shape, else a cap below the device, else simply too much
  // live data. (Blocks pending free on other streams cannot be the cause: the OOM sequence
  // waits for every stream before giving up.)
  if (r.usage.free >= r.block_bytes) {
    r.cause = OomCause::fragmentation;
  } else if (capped && info.reserved_bytes + info.allocation_bytes > info.device_total) {
    r.cause = OomCause::memory_fraction;
  } else {
    r.cause = OomCause::device_full;
  }

  const HistoryRecorder* recorder = input.recorder;
  if (recorder != nullptr) {
    const HistoryOptions o = recorder->options();
    r.stacks_recorded = stacks_captured(o);
  }
  // Sites by stack: handles of one call site (reached through different allocator paths)
  // resolve to one Frames object.
  std::vector<std::uint64_t> contexts;
  for (const auto& [context, site] : sites) contexts.push_back(context);
  const std::vector<Frames> frames =
      recorder != nullptr ? recorder->frames_of(contexts) : std::vector<Frames>(contexts.size());
  std::map<const void*, AllocationSite> merged;
  std::size_t i = 0;
  for (const auto& [context, site] : sites) {
    const Frames& f = frames[i++];
    AllocationSite& m = merged[f != nullptr ? static_cast<const void*>(f.get()) : nullptr];
    m.frames = f;
    m.bytes += site.bytes;
    m.requested_bytes += site.requested_bytes;
    m.count += site.count;
  }
  for (auto& [key, site] : merged) r.top_sites.push_back(std::move(site));
  std::stable_sort(r.top_sites.begin(), r.top_sites.end(),
                   [](const AllocationSite& a, const AllocationSite& b) { return a.bytes > b.bytes; });
  if (r.top_sites.size() > top_sites) r.top_sites.resize(top_sites);
  return r;
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
