// The compiled library's NVTX ranges for profiled scopes (nvToolsExt.h stays out of its users'
// translation units), defined once here for GPUMEMPROF_COMPILED_LIB programs. The hook is
// registered by the programs that include gpumemprof/integrations/nvtx.hpp, not by the library.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/integrations/nvtx-inl.hpp"
