/* gpumemprof's PyTorch bridge: the C functions of libgpumemprof_torch.so.
 *
 * gpumemprof_malloc / gpumemprof_free have the signatures torch.cuda.memory.CUDAPluggableAllocator
 * loads; every CUDA device is served by gpumemprof's default caching allocator of "cuda:N". The
 * other functions read stats, history and snapshots of those allocators (python/gpumemprof_torch
 * wraps them). No function throws: failures return the documented error value, and the message
 * is kept for gpumemprof_last_error() (per thread) and, for malloc/free, printed on stderr.
 */
#ifndef GPUMEMPROF_TORCH_H
#define GPUMEMPROF_TORCH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(__GNUC__) || defined(__clang__)
#define GPUMEMPROF_TORCH_API __attribute__((visibility("default")))
#else
#define GPUMEMPROF_TORCH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `size` bytes on device `device` for use on `stream`; NULL for size 0 (as PyTorch's
 * allocator) and on failure (OOM: the message explains it). */
GPUMEMPROF_TORCH_API void* gpumemprof_malloc(ssize_t size, int device, cudaStream_t stream);
/* From now on (on != 0), a failed gpumemprof_malloc -- out of memory, a memory-fraction cap --
 * throws a C++ exception (std::runtime_error with the message) instead of returning NULL: PyTorch
 * calls gpumemprof_malloc from C++ and turns the exception into a Python RuntimeError, where a NULL
 * pointer would become a tensor without memory. gpumemprof_torch.install() turns it on. */
GPUMEMPROF_TORCH_API void gpumemprof_raise_on_error(int on);
/* Frees a pointer from gpumemprof_malloc (size and stream are PyTorch's bookkeeping: unused). */
GPUMEMPROF_TORCH_API void gpumemprof_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
/* Marks `ptr` as used on `stream` (torch's Tensor.record_stream); 0 on success, -1 on error. */
GPUMEMPROF_TORCH_API int gpumemprof_record_stream(void* ptr, int device, cudaStream_t stream);
/* The same without a device, as CUDAPluggableAllocator's set_record_stream_fn calls it (for
 * Tensor.record_stream and NCCL's own recordStream): the device whose allocator holds `ptr`; memory
 * gpumemprof did not allocate is left alone, as PyTorch's allocator leaves it. Never throws: an
 * error is printed on stderr. */
GPUMEMPROF_TORCH_API void gpumemprof_record_stream_any_device(void* ptr, cudaStream_t stream);

/* memory_stats of `device` as one JSON object with PyTorch's keys, written to buf (at most
 * `capacity` bytes with the terminating NUL). Returns the length of the full text (without the
 * NUL) -- call with capacity 0 to size the buffer -- or -1 on error. */
GPUMEMPROF_TORCH_API ssize_t gpumemprof_memory_stats_json(int device, char* buf, size_t capacity);
/* Writes the snapshot of `device` (a pickle for pytorch.org/memory_viz) to `path`; 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_dump_snapshot(int device, const char* path);
/* Writes `dir`/rank-<rank>.pickle (creating `dir`): the snapshot of `device` with top-level keys
 * rank, world_size, host, device and the peaks of memory_stats; 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_dump_rank_snapshot(int device, const char* dir, int rank, int world_size);
/* From now on, an OOM on `device` writes `dir`/rank-<rank>.pickle and `dir`/rank-<rank>.oom.txt
 * (the OOM report) before the allocation fails; talks to no other rank. 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_dump_on_oom(int device, const char* dir, int rank, int world_size);
/* The cross-rank report of the rank files in `dir` as text (what `gpumemprof summary DIR` prints),
 * written to buf like gpumemprof_memory_stats_json; the length of the full text, or -1. */
GPUMEMPROF_TORCH_API ssize_t gpumemprof_rank_summary(const char* dir, char* buf, size_t capacity);
/* record_memory_history on `device`: enabled 0 = off, 1 = state, 2 = all; max_entries 0 =
 * unbounded. 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_record_memory_history(int device, int enabled, size_t max_entries);
/* torch.cuda.memory._record_memory_history for every device, in PyTorch's words: enabled
 * "all"/"state"/"" (off), context "all"/"alloc"/"state"/"", stacks "python" (the calling thread's
 * Python frames), "all" (C++ frames, then the Python frames), "cpp" or ""; max_entries 0 =
 * unbounded; clear_history != 0 drops the events so far. Applies to each device the bridge has
 * used and to each device when first used. 0 or -1 (a bad word: the message names it). */
GPUMEMPROF_TORCH_API int gpumemprof_history(const char* enabled, const char* context, const char* stacks,
                                            size_t max_entries, int clear_history);
/* The devices the bridge has used (served, read or configured), ascending: writes up to `capacity`
 * of them to out and returns how many there are. */
GPUMEMPROF_TORCH_API int gpumemprof_devices_in_use(int* out, int capacity);
/* Writes one snapshot of every device in use to `path` (a pickle; one device_traces list per
 * device up to the highest in use, the segments of all), as torch.cuda.memory._snapshot(); 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_dump_snapshot_devices(const char* path);
/* torch.cuda.reset_peak_memory_stats / reset_accumulated_memory_stats of `device`; 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_reset_peak_memory_stats(int device);
GPUMEMPROF_TORCH_API int gpumemprof_reset_accumulated_memory_stats(int device);
/* torch.cuda.set_per_process_memory_fraction: caps `device`'s reserved memory at `fraction`
 * (0..1) of its total memory; 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_set_memory_fraction(int device, double fraction);
/* Releases cached, unused memory of `device` to CUDA (torch.cuda.empty_cache); 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_empty_cache(int device);
/* The same on every device the bridge has used, as CUDAPluggableAllocator's set_reset_fn calls it
 * (libtorch's own emptyCache: torch.accelerator.empty_cache and C++ callers). Never throws: an error
 * is printed on stderr. */
GPUMEMPROF_TORCH_API void gpumemprof_empty_cache_all(void);
/* Starts tracking device memory outside the allocator on every GPU (NCCL's buffers, cuBLAS's
 * workspace, the CUDA context, module code: each rank file then carries it). Call it before torch
 * or NCCL allocate. 1 when tracking is on, 0 when it cannot be (the reason printed once on stderr). */
GPUMEMPROF_TORCH_API int gpumemprof_track_external_memory(void);

/* The allocator's counters of `device` at this instant, for profiled scopes: out[0] allocated
 * bytes, out[1] reserved bytes, out[2] allocations (lifetime), out[3] frees (lifetime), out[4]
 * bytes allocated (lifetime), out[5] bytes freed (lifetime). 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_counters(int device, int64_t out[6]);
/* Opens a peak window on `device` (the peak of allocated bytes from now on, without touching
 * max_memory_allocated); returns its id, 0 on error. */
GPUMEMPROF_TORCH_API uint64_t gpumemprof_open_peak_window(int device);
/* The peak (bytes) of window `id` since it opened; closes it. -1 on error. */
GPUMEMPROF_TORCH_API int64_t gpumemprof_close_peak_window(int device, uint64_t id);

/* Memory categories (what memory is for: "parameter", "optimizer_state", "input", "temporary",
 * "activation", "gradient", "autograd_detail", or any other name), as torch.profiler's memory
 * timeline splits it. gpumemprof_set_category moves the live allocation that starts at `ptr` (a
 * tensor storage's data_ptr) into `category` ("" = unknown); with only_untagged != 0 an
 * allocation that has a category keeps it. Returns 1 when it moved, 0 when not (already there,
 * tagged, or not a live allocation of gpumemprof on `device`), -1 on error. */
GPUMEMPROF_TORCH_API int gpumemprof_set_category(void* ptr, int device, const char* category, int only_untagged);
/* From now on the calling thread's allocations are in `category` until the matching pop (scopes
 * nest, at most 64 deep; the innermost wins). 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_push_category(const char* category);
GPUMEMPROF_TORCH_API int gpumemprof_pop_category(void);
/* Bytes per category of `device` as JSON {"name": {"current": N, "peak": N, "allocated_current": N,
 * "allocated_peak": N}, ...}: current/peak are requested bytes (requested_bytes), allocated_* the
 * blocks' bytes (allocated_bytes); untagged memory is "unknown". Written to buf like
 * gpumemprof_memory_stats_json. Peaks count from the first category call of the process or the
 * last gpumemprof_reset_category_peaks. */
GPUMEMPROF_TORCH_API ssize_t gpumemprof_category_stats_json(int device, char* buf, size_t capacity);
/* Sets every category's peak on `device` to its current bytes; 0 or -1. */
GPUMEMPROF_TORCH_API int gpumemprof_reset_category_peaks(int device);

/* The calling thread's Python frames now, as a JSON list of {"filename", "line", "name"}, innermost
 * first: what an allocation made here carries with stacks="python" (an empty list outside Python).
 * Written to buf like gpumemprof_memory_stats_json. */
GPUMEMPROF_TORCH_API ssize_t gpumemprof_python_stack_json(char* buf, size_t capacity);
/* on != 0: from now on, an allocation on a thread that runs no Python code (autograd's threads run
 * backward while the caller waits in backward()) carries the calling thread's Python frames, so
 * backward's memory is named by the script's backward() line; 0: such allocations carry none, as
 * with PyTorch's stacks="python". Returns 1, or 0 outside Python. */
GPUMEMPROF_TORCH_API int gpumemprof_python_waiting_thread(int on);
/* Where the allocators' configuration comes from, as "VARIABLE=value": $GPUMEMPROF_ALLOC_CONF
 * when set, else PyTorch's $PYTORCH_ALLOC_CONF or $PYTORCH_CUDA_ALLOC_CONF; "" when none is set. */
GPUMEMPROF_TORCH_API const char* gpumemprof_alloc_conf(void);
/* The message of this thread's last failure ("" when none). */
GPUMEMPROF_TORCH_API const char* gpumemprof_last_error(void);

#ifdef __cplusplus
}  // extern "C"

#include <functional>
#include <utility>

/* PyTorch's CUDA graph hooks: CUDAPluggableAllocator's _allocator.set_begin_allocate_to_pool,
 * set_end_allocate_to_pool_fn and set_release_pool take these functions' addresses and call them as
 * C++ functions of exactly these types (c10::cuda::MempoolId_t is a std::pair of unsigned long
 * long). torch.cuda.graph's capture_begin routes the allocations of its capturing stream (filter)
 * to pool `pool` of `device`, capture_end ends the route, and the graph's reset releases the pool;
 * torch.compile's cudagraph trees route a thread's allocations the same way. Never throw: an error
 * (an unknown pool) is printed on stderr and kept for gpumemprof_last_error(). */
extern "C" {
GPUMEMPROF_TORCH_API void gpumemprof_begin_allocate_to_pool(int device,
                                                            std::pair<unsigned long long, unsigned long long> pool,
                                                            std::function<bool(cudaStream_t)> filter);
GPUMEMPROF_TORCH_API void gpumemprof_end_allocate_to_pool(int device,
                                                          std::pair<unsigned long long, unsigned long long> pool);
GPUMEMPROF_TORCH_API void gpumemprof_release_pool(int device, std::pair<unsigned long long, unsigned long long> pool);
}
#endif
#endif
