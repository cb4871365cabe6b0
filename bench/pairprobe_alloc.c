/* bench/gpu_pairprobe.sh's two C pieces, built as one shared library on the GPU host.
 *
 * 1. A minimal allocator for PyTorch's CUDAPluggableAllocator (pairprobe_malloc / pairprobe_free):
 *    one LIFO stack of blocks per exact size (at most 64 sizes), blocks carved once from
 *    cudaMalloc and never returned. It does close to nothing per call, so torch.empty's time on it
 *    is what PyTorch's pluggable-allocator path costs by itself.
 * 2. pairprobe_time: ns per allocate+free pair of any (malloc, free) pair of C functions with the
 *    pluggable signature, called from C in a loop (no Python in between), cycling six sizes. */
#define _POSIX_C_SOURCE 199309L
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

int cudaMalloc(void** ptr, size_t size); /* libcudart; the probe needs nothing else of it */

enum { kSizes = 64, kDepth = 256 };
static size_t sizes[kSizes];
static void* stacks[kSizes][kDepth];
static int depth[kSizes];
static int used;

static int class_of(size_t size) {
  for (int i = 0; i < used; ++i)
    if (sizes[i] == size) return i;
  if (used == kSizes) return -1;
  sizes[used] = size;
  return used++;
}

void* pairprobe_malloc(ssize_t size, int device, void* stream) {
  (void)device;
  (void)stream;
  if (size <= 0) return NULL;
  int c = class_of((size_t)size);
  if (c >= 0 && depth[c] > 0) return stacks[c][--depth[c]];
  void* p = NULL;
  if (cudaMalloc(&p, (size_t)size) != 0) return NULL;
  return p;
}

void pairprobe_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)device;
  (void)stream;
  if (ptr == NULL) return;
  int c = class_of((size_t)size);
  if (c >= 0 && depth[c] < kDepth) stacks[c][depth[c]++] = ptr; /* else: kept, never reused */
}

typedef void* (*malloc_fn)(ssize_t, int, void*);
typedef void (*free_fn)(void*, ssize_t, int, void*);

double pairprobe_time(malloc_fn m, free_fn f, void* stream, int pairs) {
  static const ssize_t probe_sizes[6] = {512, 4096, 65536, 1 << 20, 3 << 20, 12 << 20};
  void* keep[6];
  for (int i = 0; i < 6; ++i) keep[i] = m(probe_sizes[i], 0, stream); /* segments exist */
  for (int i = 0; i < 6; ++i) f(keep[i], probe_sizes[i], 0, stream);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < pairs; ++i) {
    ssize_t s = probe_sizes[i % 6];
    void* p = m(s, 0, stream);
    f(p, s, 0, stream);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / pairs;
}
