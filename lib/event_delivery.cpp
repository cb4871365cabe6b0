// The compiled library's delivery of allocator events to the sinks (EventDelivery), defined once
// here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/event_delivery-inl.hpp"
