// Layer 2: CachingAllocator's statistics -- memory_stats(), the resets and the peak windows, all
// read through the ledger (stats_ledger.hpp). Included by caching_allocator.hpp; not a header to include on
// its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <DeviceBackend Backend>
MemoryStats CachingAllocator<Backend>::memory_stats() const {
  return ledger_.read([](const detail::StatsLedger::State& s) { return s.stats; });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_peak_memory_stats() {
  ledger_.read([](detail::StatsLedger::State& s) { s.stats.reset_peak(); });
}

template <DeviceBackend Backend>
void CachingAllocator<Backend>::reset_accumulated_memory_stats() {
  ledger_.read([](detail::StatsLedger::State& s) { s.stats.reset_accumulated(); });
}

template <DeviceBackend Backend>
std::uint64_t CachingAllocator<Backend>::open_peak_window() {
  return ledger_.read(
      [](detail::StatsLedger::State& s) { return s.windows.open(s.stats.allocated_bytes[StatPool::all].current); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::close_peak_window(std::uint64_t id) {
  return ledger_.read([id](detail::StatsLedger::State& s) { return s.windows.close(id); });
}

template <DeviceBackend Backend>
std::int64_t CachingAllocator<Backend>::peak_window(std::uint64_t id) const {
  return ledger_.read([id](const detail::StatsLedger::State& s) { return s.windows.peak(id); });
}

GPUMEMPROF_NAMESPACE_END
