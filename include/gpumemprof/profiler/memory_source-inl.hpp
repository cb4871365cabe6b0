// Layer 4: the CUDA and history calls of the profiler's memory sources. Included by memory_source.hpp in
// header-only mode; compiled once in the library (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/profiler/memory_source.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

GPUMEMPROF_FUNC void synchronize_cuda_device([[maybe_unused]] int device) {
#if GPUMEMPROF_WITH_CUDA
  cuda_synchronize(device);
#endif
}

GPUMEMPROF_FUNC Frames recorded_frames(const void* allocator, std::uint64_t context) {
  const HistoryRecorder* recorder = RecorderRegistry::instance().find(allocator);
  return recorder != nullptr ? recorder->frames_of(context) : nullptr;
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
