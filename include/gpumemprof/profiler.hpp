// gpumemprof's profiler: GPUMemoryProfiler (profiled functions and scopes, the background
// sampler, summaries), MemoryTracker (alerts), LeakDetector, and allocation history
// (record_memory_history) with what they need of the allocator. No snapshot writers, readers or
// reports: a light include (gpumemprof.hpp adds dump_snapshot, memory_summary, the exporters).
// With the compiled library (GPUMEMPROF_COMPILED_LIB) it is lighter still: GPUMemoryProfiler and
// its results only; include gpumemprof/profiler/leak_detector.hpp, gpumemprof/profiler/tracker.hpp
// or gpumemprof/history/history_recorder.hpp for the others.
#pragma once

#include "gpumemprof/allocator.hpp"

#include "gpumemprof/history/history_options.hpp"

#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/profile_result.hpp"
#include "gpumemprof/profiler/profile_summary.hpp"
#include "gpumemprof/profiler/profiler.hpp"

#ifndef GPUMEMPROF_COMPILED_LIB  // compiled library: with their own headers (above)
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/tracker.hpp"
#endif
