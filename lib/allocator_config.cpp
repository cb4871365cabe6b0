// The compiled library's parser of the allocator's options (AllocatorConfig::parse, from_env),
// defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/allocator_config-inl.hpp"
