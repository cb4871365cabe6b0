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

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/analysis/memory_facts.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/history/recorder_registry.hpp"
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
  [[nodiscard]] std::string to_string(std::size_t max_segments = 10, std::size_t max_frames = 6) const;
};

/// The report for `info` from `allocator`'s current state. Call it from an OOM observer (the
/// allocator's lock is not held then); `top_sites` bounds the allocation sites listed.
namespace detail {

/// What make_oom_report reads from an allocator at its OOM.
struct OomReportInput {
  std::string device_name;
  std::uint64_t block_bytes = 0;              ///< the request rounded to a block size
  std::uint64_t device_total = 0;             ///< the device's own capacity (mem_get_info)
  DeviceMemory device;                        ///< device_memory(allocator)
  std::vector<SegmentView> segments;          ///< the allocator's segments
  const HistoryRecorder* recorder = nullptr;  ///< history_recorder_of(allocator)
};

/// make_oom_report's work, on what it read from the allocator.
[[nodiscard]] OomReport make_oom_report(const OomInfo& info, OomReportInput input, std::size_t top_sites);

}  // namespace detail

/// The report for `info` from `allocator`'s current state. Call it from an OOM observer (the
/// allocator's lock is not held then); `top_sites` bounds the allocation sites listed.
template <DeviceBackend B>
[[nodiscard]] OomReport make_oom_report(const CachingAllocator<B>& allocator, const OomInfo& info,
                                        std::size_t top_sites = 10) {
  return detail::make_oom_report(info,
                                 {.device_name = allocator.device_name(),
                                  .block_bytes = round_size(info.requested_bytes, allocator.config()),
                                  .device_total = allocator.mem_get_info().total,
                                  .device = device_memory(allocator),
                                  .segments = allocator.segments(),
                                  .recorder = history_recorder_of(allocator)},
                                 top_sites);
}

/// Keeps the reports of one allocator's OOMs (see attach_oom_reporter).
class OomReporter {
 public:
  /// The report of the latest OOM, if any.
  [[nodiscard]] std::optional<OomReport> last() const;
  /// OOMs seen since attaching.
  [[nodiscard]] std::size_t count() const;

  void add(OomReport report);

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

#ifdef GPUMEMPROF_COMPILED_LIB
// Compiled once for the default allocator's type, in the gpumemprof library (lib/analysis.cpp).
extern template OomReport make_oom_report<AnyBackend>(const CachingAllocator<AnyBackend>&, const OomInfo&, std::size_t);
extern template std::shared_ptr<OomReporter> attach_oom_reporter<AnyBackend>(CachingAllocator<AnyBackend>&,
                                                                             OomReportOptions);
#endif

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/oom_report-inl.hpp"
#endif
