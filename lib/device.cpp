// The compiled library's device layer: Device's parsing and checks, AnyBackend::for_device(), the
// external-memory ledger and the simulated device's memory outside the allocator (the parts that
// ask the CUDA runtime or know every backend), defined once here for GPUMEMPROF_COMPILED_LIB
// programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/allocator/device_memory-inl.hpp"
#include "gpumemprof/device/any_backend-inl.hpp"
#include "gpumemprof/device/device-inl.hpp"
#include "gpumemprof/device/external_memory-inl.hpp"
#include "gpumemprof/device/simulated_external-inl.hpp"
