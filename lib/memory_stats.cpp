// The compiled library's reads of MemoryStats by PyTorch's flat keys (as_map, at), defined once
// here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/memory_stats-inl.hpp"
