// The compiled library's default allocators: default_allocator() and its per-device slots,
// defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/default_allocator-inl.hpp"
