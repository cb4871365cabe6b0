// Layer 4: the CUDA call of the profiler's memory sources. Included by memory_source.hpp in
// header-only mode; compiled once in the library (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/profiler/memory_source.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

GPUMEMPROF_FUNC void synchronize_cuda_device([[maybe_unused]] int device) {
#if GPUMEMPROF_WITH_CUDA
  cuda_synchronize(device);
#endif
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
