// The compiled library's stack symbolization (Boost.Stacktrace), defined once here for
// GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/history/stacks-inl.hpp"
