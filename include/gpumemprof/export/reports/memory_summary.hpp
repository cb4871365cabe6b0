// Layer 5: memory_summary(), the text table of torch.cuda.memory_summary(): the same rows,
// columns, unit rules and frame, generated from the MemoryStats key list.
#pragma once

#include <string>
#include <vector>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/mempool_id.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
/// The summary table of `stats` for device `device_name`; `abbreviated` leaves out the
/// per-pool rows, as in PyTorch.
[[nodiscard]] std::string memory_summary(const MemoryStats& stats, const std::string& device_name,
                                         bool abbreviated = false);

/// torch.cuda.memory_summary(device, abbreviated) for the default allocator of `device`, then
/// the device's memory as a whole: the driver's used bytes beside the allocator's reserved bytes,
/// external allocations by owner, module code, the CUDA context and what is unattributed.
[[nodiscard]] std::string memory_summary(const Device& device = Device(), bool abbreviated = false);

/// One line per private pool (MemPool, graph pool): reserved and allocated bytes, users; "" for none.
[[nodiscard]] std::string format_pool_stats(const std::vector<PoolStats>& pools);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/reports.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/reports/memory_summary-inl.hpp"
#endif
