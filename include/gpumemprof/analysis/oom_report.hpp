// Analysis layer: OOM forensics. The allocator's OutOfMemoryError says how much was asked for and how
// much is free; this report says why the memory was not there:
//   - the cause: the device is full, the memory fraction is reached, or fragmentation (enough
//     memory reserved but unallocated, yet no cached block large enough);
//   - the largest free block against the block the request needed;
//   - per segment, how its bytes split into allocated, free and pending-free blocks;
//   - the live allocation sites holding the most memory, with stacks when history records them.
//
//   auto reporter = gmp::attach_oom_reporter(alloc);     // once
//   try { ... } catch (const gmp::OutOfMemoryError&) { std::cerr << reporter->last()->to_string(); }
//
// The allocator calls OOM observers after releasing its lock, just before it throws; the
// report reads the allocator's state at that moment. Per-segment usage and fragmentation are the
// facts of analysis/memory_facts.hpp, so this report and the snapshot reports agree.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class OomCause : std::uint8_t {
  device_full,      ///< the allocator caches too little free memory to help: the device is full
  fragmentation,    ///< enough is reserved but unallocated, but no free block is large enough
  memory_fraction,  ///< the per-process memory fraction, not the device, is the limit
};

[[nodiscard]] constexpr const char* to_string(OomCause c) noexcept {
  switch (c) {
    case OomCause::device_full: return "device full";
    case OomCause::fragmentation: return "fragmentation";
    case OomCause::memory_fraction: return "memory fraction";
  }
  return "device full";
}

/// How one segment's bytes split at the OOM (the facts of analysis/memory_facts.hpp).
struct SegmentUsage {
  std::uint64_t address = 0;
  std::uint64_t stream = 0;
  bool is_large = true;
  SegmentFacts facts;
};

/// Live allocations made from one place.
struct AllocationSite {
  Frames frames;                      ///< nullptr when stacks were not recorded
  std::uint64_t bytes = 0;            ///< block bytes held
  std::uint64_t requested_bytes = 0;  ///< bytes the callers asked for
  std::size_t count = 0;              ///< live blocks
};

struct OomReport {
  OomInfo info;                            ///< what the allocator reported (bytes)
  std::string device_name;                 ///< "sim:0", "cuda:1"
  std::uint64_t block_bytes = 0;           ///< the request rounded to a block size
  bool small_pool = false;                 ///< the pool the request belongs to
  std::uint64_t reserved_unallocated = 0;  ///< reserved - allocated
  /// Summed over every segment, pool and stream: free = in inactive (cached) blocks, pending =
  /// in active_pending_free blocks (other threads' frees), largest_free over all of them.
  SegmentFacts usage;
  std::uint64_t not_ours_bytes = 0;  ///< device memory in use but not reserved by this allocator
  OomCause cause = OomCause::device_full;
  bool stacks_recorded = false;
  std::vector<SegmentUsage> segments;     ///< most free bytes first
  std::vector<AllocationSite> top_sites;  ///< most bytes first
  DeviceMemory device;                    ///< the whole device at the OOM: who else holds it

  /// The report as text, one finding a line.
  [[nodiscard]] std::string to_string(std::size_t max_segments = 10, std::size_t max_frames = 6) const {
    std::string out;
    auto line = [&out](const std::string& s) { out += s + "\n"; };
    line("Out of memory on " + device_name + ": a request of " + format_size(info.requested_bytes) + " (a " +
         format_size(block_bytes) + " block, " + (small_pool ? "small" : "large") + " pool) needed a new " +
         format_size(info.allocation_bytes) + " segment; the device has " + format_size(info.device_free) +
         " free of " + format_size(info.device_total) + ".");
    if (const std::string others = describe_outside_allocator(device); !others.empty()) {
      line("Out of memory with " + format_size(info.reserved_bytes) + " reserved of " + format_size(device.total) +
           ": " + others + ".");
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
        why = "the per-process memory fraction allows " + format_size(info.device_total) +
              "; this allocator reserves " + format_size(info.reserved_bytes) + ".";
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
        line(std::string("  ") + addr + " " + format_size(u.reserved) + (s.is_large ? " large" : " small") +
             ", stream " + std::to_string(s.stream) + ": " + format_size(u.allocated) + " allocated, " +
             format_size(u.free) + " free in " + std::to_string(u.free_blocks) + " " + plural(u.free_blocks, "block") +
             " (largest " + format_size(u.largest_free) + ")" +
             (u.pending != 0 ? ", " + format_size(u.pending) + " pending free" : ""));
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
};

/// The report for `info` from `allocator`'s current state. Call it from an OOM observer (the
/// allocator's lock is not held then); `top_sites` bounds the allocation sites listed.
template <DeviceBackend B>
[[nodiscard]] OomReport make_oom_report(const CachingAllocator<B>& allocator, const OomInfo& info,
                                        std::size_t top_sites = 10) {
  OomReport r;
  r.info = info;
  r.device_name = allocator.device_name();
  r.block_bytes = round_size(info.requested_bytes, allocator.config());
  r.small_pool = is_small_size(r.block_bytes);
  r.reserved_unallocated = info.reserved_bytes - std::min(info.reserved_bytes, info.allocated_bytes);
  // info.device_total is the allowed maximum under a memory fraction; the device tells its own.
  const std::uint64_t real_total = std::max<std::uint64_t>(allocator.mem_get_info().total, info.device_total);
  const bool capped = info.device_total < real_total;
  const std::uint64_t device_used = real_total - std::min<std::uint64_t>(real_total, info.device_free);
  r.not_ours_bytes = device_used - std::min<std::uint64_t>(device_used, info.reserved_bytes);
  r.device = device_memory(allocator);

  std::map<std::uint64_t, AllocationSite> sites;  // by context handle (one per stack)
  allocator.visit_segments([&](const SegmentView& v) {
    const SegmentUsage& s = r.segments.emplace_back(SegmentUsage{v.address, v.stream.id, v.is_large, segment_facts(v)});
    r.usage += s.facts;
    for (const BlockView& b : v.blocks) {
      if (b.state != BlockState::active_allocated) continue;
      AllocationSite& site = sites[b.context];
      site.bytes += b.size;
      site.requested_bytes += b.requested_size;
      ++site.count;
    }
  });
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

  const HistoryRecorder* recorder = history_recorder_of(allocator);
  if (recorder != nullptr) {
    const HistoryOptions o = recorder->options();
    r.stacks_recorded = stacks_available && o.enabled != HistoryEnabled::off && o.stacks == HistoryStacks::cpp &&
                        o.context != HistoryContext::none;
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

/// Keeps the reports of one allocator's OOMs (see attach_oom_reporter).
class OomReporter {
 public:
  /// The report of the latest OOM, if any.
  [[nodiscard]] std::optional<OomReport> last() const {
    std::lock_guard lock(mutex_);
    return last_;
  }
  /// OOMs seen since attaching.
  [[nodiscard]] std::size_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }

  void add(OomReport report) {
    std::lock_guard lock(mutex_);
    last_ = std::move(report);
    ++count_;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<OomReport> last_;
  std::size_t count_ = 0;
};

struct OomReportOptions {
  std::size_t top_sites = 10;                       ///< allocation sites kept per report
  bool print = false;                               ///< also write each report to stderr
  std::function<void(const OomReport&)> on_report;  ///< called with each report
};

/// Builds an OomReport at each OOM of `allocator` (an OOM observer that lives as long as the
/// allocator). The returned reporter holds the latest.
template <DeviceBackend B>
std::shared_ptr<OomReporter> attach_oom_reporter(CachingAllocator<B>& allocator, OomReportOptions options = {}) {
  auto reporter = std::make_shared<OomReporter>();
  allocator.attach_oom_observer([&allocator, reporter, options = std::move(options)](const OomInfo& info) {
    OomReport report = make_oom_report(allocator, info, options.top_sites);
    if (options.print) std::fputs(report.to_string().c_str(), stderr);
    if (options.on_report) options.on_report(report);
    reporter->add(std::move(report));
  });
  return reporter;
}

GPUMEMPROF_NAMESPACE_END
