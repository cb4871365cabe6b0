// The compiled library's profiler: GPUMemoryProfiler's and ProfileScope's member bodies,
// defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/profiler/profiler-inl.hpp"
