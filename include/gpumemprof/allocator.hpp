// gpumemprof's allocator alone: the devices ("cuda:N", "sim:N", "host"), the caching allocator,
// default_allocator() with the torch.cuda-style free functions (memory_stats, memory_allocated,
// empty_cache, ...), MemoryStats, and the std adapters (Allocator<T>, MemoryResource). No
// history, profiler or reports: a light include (gpumemprof.hpp has everything).
#pragma once

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/memory_resource.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/size_literals.hpp"
#include "gpumemprof/allocator/std_allocator.hpp"
