// The PyTorch bridge's CUDA graph hooks over one caching allocator: what the exported
// gpumemprof_begin_allocate_to_pool, gpumemprof_end_allocate_to_pool, gpumemprof_release_pool and
// gpumemprof_record_stream_any_device (gpumemprof_torch.h) do once they know the device. Templates
// over the allocator, so that tests run them on the simulated device.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <span>
#include <utility>

#include "gpumemprof/allocator/mempool_id.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

namespace gpumemprof_torch {

/// c10::cuda::MempoolId_t: (0, 0) the default pool, (N, 0) a graph's own, (0, N) a shared one.
using TorchPoolId = std::pair<unsigned long long, unsigned long long>;
/// What torch's CUDAGraph::capture_begin passes: does an allocation on this stream belong to the
/// capture (its capture id), or to this thread (cudagraph trees' warm-up)?
using TorchStreamFilter = std::function<bool(cudaStream_t)>;

inline gpumemprof::MempoolId pool_id(TorchPoolId id) noexcept { return {id.first, id.second}; }

/// torch's filter over cudaStream_t as the allocator's over Stream; no filter: every allocation.
inline std::function<bool(gpumemprof::Stream)> stream_filter(TorchStreamFilter filter) {
  if (!filter) return {};
  return [f = std::move(filter)](gpumemprof::Stream s) { return f(s.as<CUstream_st>()); };
}

/// beginAllocateToPool: allocations for which `filter` holds go to pool `id` until the matching end.
template <class Allocator>
void begin_allocate_to_pool(Allocator& a, TorchPoolId id, TorchStreamFilter filter) {
  a.begin_allocate_to_pool(pool_id(id), stream_filter(std::move(filter)));
}

/// endAllocateToPool: the route ends; the pool keeps its user (the graph) until release_pool.
template <class Allocator>
void end_allocate_to_pool(Allocator& a, TorchPoolId id) {
  a.end_allocate_to_pool(pool_id(id));
}

/// releasePool: the graph is gone; with no user left the pool's memory goes back as it frees.
template <class Allocator>
void release_pool(Allocator& a, TorchPoolId id) {
  a.release_pool(pool_id(id));
}

/// Tensor.record_stream (and NCCL's recordStream): marks `ptr` as used on `stream` in whichever
/// of `allocators` holds it, tried in order. False when none does: memory another allocator made
/// (DLPack, from_blob) is left alone, as PyTorch's own allocator leaves it.
template <class Allocator>
bool record_stream_in_owner(void* ptr, gpumemprof::Stream stream, std::span<Allocator* const> allocators) {
  if (ptr == nullptr) return false;
  for (Allocator* a : allocators) {
    try {
      a->record_stream(ptr, stream);
      return true;
    } catch (const gpumemprof::InvalidPointerError&) {
      // not this device's: the next
    }
  }
  return false;
}

}  // namespace gpumemprof_torch
