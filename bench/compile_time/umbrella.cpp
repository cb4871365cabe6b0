// Compile-time probe (bench/compile_time/measure.sh): the program of allocator_profiler.cpp
// with the umbrella header, which adds snapshots, reports and exporters.
#include <gpumemprof/gpumemprof.hpp>

#include "allocator_profiler.cpp"
