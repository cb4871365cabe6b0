// gpumemprof's profiler: GPUMemoryProfiler (profiled functions and scopes, the background
// sampler, summaries), MemoryTracker (alerts), LeakDetector, and allocation history
// (record_memory_history) with what they need of the allocator. No snapshot writers, readers or
// reports: a light include (gpumemprof.hpp adds dump_snapshot, memory_summary, the exporters).
#pragma once

#include "gpumemprof/allocator.hpp"

#include "gpumemprof/history/history_options.hpp"
#include "gpumemprof/history/history_recorder.hpp"

#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/profile_summary.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"
