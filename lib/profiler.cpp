// The compiled library's profiler: GPUMemoryProfiler's and ProfileScope's member bodies, the
// sampler's thread, the summary, the leak detector and the tracker, and the CUDA and history
// calls of its memory sources, defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/profiler/leak_detector-inl.hpp"
#include "gpumemprof/profiler/memory_source-inl.hpp"
#include "gpumemprof/profiler/profile_summary-inl.hpp"
#include "gpumemprof/profiler/profiler-inl.hpp"
#include "gpumemprof/profiler/sampler-inl.hpp"
#include "gpumemprof/profiler/tracker-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template LeakDetector::LeakDetector(CachingAllocator<AnyBackend>&, LeakDetectorOptions);
template MemoryTracker::MemoryTracker(CachingAllocator<AnyBackend>&, const TrackerOptions&);

GPUMEMPROF_NAMESPACE_END
