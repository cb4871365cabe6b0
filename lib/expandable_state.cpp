// The compiled library's state of expandable segments between growths (ExpandableState), defined
// once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/expandable_state-inl.hpp"
