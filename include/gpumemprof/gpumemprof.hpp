// gpumemprof: everything, in layer order. Include this one header; `namespace gmp = gpumemprof;`.
#pragma once

// 0 config & errors
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

// 1 devices
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/backend.hpp"
// Compiled library: its backends are in libgpumemprof, and a program naming CudaBackend,
// HostBackend or SimulatedBackend includes gpumemprof/device/cuda.hpp, host.hpp or simulated.hpp.
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/device/cupti.hpp"
#include "gpumemprof/device/host.hpp"
#include "gpumemprof/device/simulated.hpp"
#endif
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/external_memory.hpp"

// 2 allocator
#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/allocator/introspection.hpp"
#include "gpumemprof/allocator/mem_pool.hpp"
#include "gpumemprof/allocator/memory_resource.hpp"
#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/allocator/size_literals.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/allocator/std_allocator.hpp"

// 3 history & snapshot
#include "gpumemprof/history/annotations.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/history_options.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/history/user_metadata.hpp"

// analysis (between history and the profiler)
#include "gpumemprof/analysis/rank_budget.hpp"
#include "gpumemprof/analysis/oom_report.hpp"

// 4 profiler
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/profile_summary.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"

// 5 export (in compiled mode, declarations: the library has the bodies)
#include "gpumemprof/export/formats/dump_snapshot.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/memory_summary.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
#include "gpumemprof/export/formats/profile_export.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/snapshot_summary.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"

// 6 integrations
#include "gpumemprof/integrations/nvtx.hpp"
