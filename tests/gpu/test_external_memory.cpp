// Every byte on a real device: with tracking started first thing, a direct cudaMalloc, a cuBLAS
// GEMM, cuDNN (when present), an NCCL communicator over every visible GPU, a cudaMallocAsync
// pool, cudaMallocPitch and cudaMalloc3D each land under the right owner (allocations and module
// code), gpumemprof's own segments are not counted twice, and what stays unattributed is within
// 2 MiB of zero once the context is counted; managed memory (cudaMallocManaged,
// cuMemAllocManaged) and pinned host memory (cudaMallocHost) stay out of the ledger; with stacks on,
// the program's top site carries the C++ stack of its cudaMalloc; with another CUPTI subscriber in
// the process (a child run of this program), tracking says so in one line. Run it with
// CUDA_MODULE_LOADING=LAZY and =EAGER (meson registers both).
//
// The libraries are opened at run time (dlopen), so the binary runs where any is missing: that
// part is skipped with its reason. Exit 77 without a GPU (meson: skipped), 1 on a failed check.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "../units.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/device/cupti.hpp"
#include "gpumemprof/history/stacks.hpp"

namespace gmp = gpumemprof;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// The first library among `names` that opens, or nullptr (the reason printed).
void* open_library(const char* part, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* h = ::dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
  }
  std::printf("SKIP: %s: none of its libraries opens (%s); set LD_LIBRARY_PATH to its directory\n", part, ::dlerror());
  return nullptr;
}

template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}

/// Bytes of `owners` whose name starts with `prefix`.
std::size_t bytes_of(const std::vector<gmp::OwnerMemory>& owners, std::string_view prefix) {
  std::size_t n = 0;
  for (const auto& o : owners) {
    if (std::string_view(o.owner).substr(0, prefix.size()) == prefix) n += o.bytes;
  }
  return n;
}

/// Diagnostics for a step: every device's used bytes (the driver's count) and what stays unattributed.
void print_step(const char* step, int devices) {
  int current = 0;
  cuda(cudaGetDevice(&current), "cudaGetDevice");
  for (int d = 0; d < devices; ++d) {
    const gmp::DeviceMemory md = gmp::device_memory(gmp::Device::cuda(d));
    std::size_t stack = 0;  // the per-thread stack limit: local memory grows with it
    cuda(cudaSetDevice(d), "cudaSetDevice");
    cuda(cudaDeviceGetLimit(&stack, cudaLimitStackSize), "cudaDeviceGetLimit");
    std::printf("  %-28s cuda:%d used %llu bytes, unattributed %lld bytes, stack limit %zu bytes\n", step, d,
                static_cast<unsigned long long>(md.used), static_cast<long long>(md.unattributed), stack);
  }
  cuda(cudaSetDevice(current), "cudaSetDevice");
}

/// Diagnostics: what the capture charged inside calls that allocate nothing (kernel launches growing
/// local memory, peer access), and which callbacks ran.
void print_capture() {
#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI
  for (const auto& g : gmp::detail::cupti::growths()) {
    std::printf("  growth: cuda:%d %s by %s: %llu bytes (used %llu -> %llu)\n", g.device, g.call.c_str(),
                g.owner.c_str(), static_cast<unsigned long long>(g.bytes),
                static_cast<unsigned long long>(g.used_before), static_cast<unsigned long long>(g.used_after));
  }
  std::string seen;
  for (const auto& [name, n] : gmp::detail::cupti::callbacks_seen()) seen += " " + name + " x" + std::to_string(n);
  std::printf("  callbacks:%s\n", seen.c_str());
#endif
}

std::string program_owner() {
  std::string_view p = program_invocation_short_name;
  return std::string(p);
}

/// cudaMallocPitch and cudaMalloc3D land under the program at pitch x rows (kept to the final
/// account, so unattributed checks their size against the driver's count).
void pitched_kinds() {
  const std::size_t before = bytes_of(gmp::device_memory("cuda:0").external_by_owner, program_owner());
  void* pitched = nullptr;
  std::size_t pitch = 0;
  cuda(cudaMallocPitch(&pitched, &pitch, 8192, 256), "cudaMallocPitch");
  std::size_t now = bytes_of(gmp::device_memory("cuda:0").external_by_owner, program_owner());
  check(now - before == pitch * 256, "cudaMallocPitch (8192 bytes x 256 rows, pitch " + std::to_string(pitch) +
                                         ") is held by " + program_owner() + ": " + std::to_string(now - before) +
                                         " bytes");
  cudaPitchedPtr volume{};
  cuda(cudaMalloc3D(&volume, cudaExtent{8192, 128, 4}), "cudaMalloc3D");
  const std::size_t with_3d = bytes_of(gmp::device_memory("cuda:0").external_by_owner, program_owner());
  check(with_3d - now == volume.pitch * 128 * 4, "cudaMalloc3D (8192 bytes x 128 x 4, pitch " +
                                                     std::to_string(volume.pitch) + ") is held by " + program_owner() +
                                                     ": " + std::to_string(with_3d - now) + " bytes");
}

/// A direct cudaMalloc with stacks on: the program's top site comes with the C++ stack of the call.
GPUMEMPROF_NOINLINE void* malloc_with_stack(std::size_t bytes) {
  void* p = nullptr;
  cuda(cudaMalloc(&p, bytes), "cudaMalloc with stacks");
  asm volatile("" : : "r"(p) : "memory");  // no tail call: this frame stays on the stack
  return p;
}

void stacks_of_a_direct_malloc() {
  (void)gmp::track_external_memory({.stacks = true});
  void* p = malloc_with_stack(256 * MiB);  // more than the program's other live allocations
  const gmp::DeviceMemory m = gmp::device_memory("cuda:0");
  std::vector<std::string> stack;
  for (const gmp::OwnerMemory& o : m.external_by_owner) {
    if (o.owner == program_owner()) stack = o.top_stack;
  }
  std::printf("  stack of %s's top site:\n", program_owner().c_str());
  for (const std::string& f : stack) std::printf("    %s\n", f.c_str());
  check(!stack.empty() && (!gmp::stacks_available || stack.front().find("malloc_with_stack") != std::string::npos),
        "with stacks, the top site's stack starts at the cudaMalloc's caller (malloc_with_stack)");
  cuda(cudaFree(p), "cudaFree");
}

/// As `test_external_memory --another-subscriber`: subscribes to CUPTI first, as Nsight would, then
/// starts tracking. Exit 0: refused (its line on stderr); 4: CUPTI took a second subscriber; 3: no
/// CUPTI to subscribe to.
int another_subscriber() {
  void* cupti = nullptr;
  for (const char* n : {"libcupti.so.13", "libcupti.so.12", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
    if (cupti == nullptr) cupti = ::dlopen(n, RTLD_NOW | RTLD_GLOBAL);
  }
  using Callback = void (*)(void*, int, unsigned, const void*);
  using Subscribe = int (*)(void**, Callback, void*);
  const auto subscribe = cupti != nullptr ? sym<Subscribe>(cupti, "cuptiSubscribe") : nullptr;
  void* handle = nullptr;
  if (subscribe == nullptr || subscribe(
                                  &handle, [](void*, int, unsigned, const void*) {}, nullptr) != 0) {
    std::printf("no CUPTI subscription to hold (%s)\n", cupti == nullptr ? ::dlerror() : "cuptiSubscribe failed");
    return 3;
  }
  std::fflush(stdout);
  return gmp::track_external_memory() ? 4 : 0;
}

/// With another CUPTI subscriber in the process, tracking says so in one line and stays off.
void another_profiler() {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  FILE* child = n > 0 ? ::popen((std::string(self) + " --another-subscriber 2>&1").c_str(), "r") : nullptr;
  if (child == nullptr) {
    std::printf("SKIP: another CUPTI subscriber: cannot run this program again\n");
    return;
  }
  std::string out, ours;  // all it printed; the lines gpumemprof printed
  char buf[1024];
  while (std::fgets(buf, sizeof buf, child) != nullptr) {
    out += buf;
    if (std::string_view(buf).starts_with("gpumemprof:")) ours += buf;
  }
  const int status = ::pclose(child);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::printf("  with another CUPTI subscriber (exit %d):\n    %s", code, out.empty() ? "(nothing)\n" : out.c_str());
  const std::string line =
      "gpumemprof: memory outside the allocator is not tracked: another profiler (Nsight Systems or Nsight Compute?) "
      "already subscribes to CUPTI, which allows one subscriber; run without it to see memory outside the allocator\n";
  if (code == 3) {
    std::printf("SKIP: another CUPTI subscriber: %s", out.c_str());
  } else if (code == 4) {  // a CUPTI that takes several subscribers: tracking works beside the other
    check(ours.empty(), "CUPTI took a second subscriber: tracking is on, silently");
  } else {
    check(code == 0 && ours == line, "another CUPTI subscriber: tracking is off, said in one line");
  }
}

/// Managed and pinned memory, after the account: on the H100 (2026-11-26) 64 MiB of used device
/// memory stayed with the driver after the managed frees -- memory no allocation call owns, so it
/// shows as unattributed and would spoil the account's check.
void managed_and_pinned() {
  const gmp::DeviceMemory m0 = gmp::device_memory("cuda:0");
  void* managed = nullptr;
  cuda(cudaMallocManaged(&managed, 64 * MiB), "cudaMallocManaged");
  CUdeviceptr managed_driver = 0;
  CUresult (*alloc_managed)(CUdeviceptr*, std::size_t, unsigned) = nullptr;
  const bool driver_ok = gmp::detail::driver_entry(alloc_managed, "cuMemAllocManaged") &&
                         alloc_managed(&managed_driver, 32 * MiB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS;
  check(driver_ok, "cuMemAllocManaged of 32 MiB");
  void* pinned = nullptr;
  cuda(cudaMallocHost(&pinned, 64 * MiB), "cudaMallocHost");
  const gmp::DeviceMemory m1 = gmp::device_memory("cuda:0");
  check(m1.external == m0.external,
        "managed memory (cudaMallocManaged 64 MiB, cuMemAllocManaged 32 MiB) and pinned host memory "
        "(cudaMallocHost 64 MiB) are not external device allocations (external " +
            std::to_string(m0.external) + " -> " + std::to_string(m1.external) + " bytes)");
  std::printf("  managed and pinned, untouched: used %+lld bytes\n",
              static_cast<long long>(m1.used) - static_cast<long long>(m0.used));
  cuda(cudaMemset(managed, 1, 64 * MiB), "cudaMemset (managed, on the device)");
  cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const gmp::DeviceMemory m2 = gmp::device_memory("cuda:0");
  std::printf("  managed touched on the device: used %+lld bytes, unattributed %+lld bytes (resident pages)\n",
              static_cast<long long>(m2.used) - static_cast<long long>(m1.used),
              static_cast<long long>(m2.unattributed) - static_cast<long long>(m1.unattributed));
  check(m2.external == m0.external, "managed pages resident on the device stay out of external");
  cuda(cudaFree(managed), "cudaFree (managed)");
  if (driver_ok) cuda(cudaFree(reinterpret_cast<void*>(managed_driver)), "cudaFree (cuMemAllocManaged)");
  cuda(cudaFreeHost(pinned), "cudaFreeHost");
  const gmp::DeviceMemory m3 = gmp::device_memory("cuda:0");
  check(m3.external == m0.external, "their frees leave external unchanged too");
  std::printf("  after their frees: used %+lld bytes, unattributed %+lld bytes against before them\n",
              static_cast<long long>(m3.used) - static_cast<long long>(m0.used),
              static_cast<long long>(m3.unattributed) - static_cast<long long>(m0.unattributed));
}

}  // namespace

/// Issue 29: a pool of the program's own (cudaMemPoolCreate) that allocates 200 MiB, frees it, is
/// trimmed to 0 and destroyed leaves nothing behind: its line goes, and unattributed does not
/// drop by its reservation. And an owner's stack ends at main (no libc start-up frames).
void own_pool_trimmed_and_destroyed() {
  const gmp::DeviceMemory before = gmp::device_memory("cuda:0");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  void* p = nullptr;
  cuda(cudaMallocFromPoolAsync(&p, 200 * MiB, pool, stream), "cudaMallocFromPoolAsync");
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  gmp::DeviceMemory m = gmp::device_memory("cuda:0");
  const std::size_t held = m.external - before.external;
  check(held >= 200 * MiB, "an own pool holding 200 MiB is counted (" + gmp::format_size(held) + ")");
  for (const auto& o : m.external_by_owner) {
    const bool startup = std::any_of(o.top_stack.begin(), o.top_stack.end(), [](const std::string& f) {
      return f.find("__libc_start_main") != std::string::npos || f == "_start" || f.starts_with("libc.so");
    });
    check(!startup, o.owner + "'s stack ends at main, without the C library's start-up frames");
  }
  cuda(cudaFreeAsync(p, stream), "cudaFreeAsync");
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
  m = gmp::device_memory("cuda:0");
  check(m.external == before.external, "trimmed to 0, the pool holds nothing (" + gmp::format_size(m.external) +
                                           " external, " + gmp::format_size(before.external) + " before)");
  cuda(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
  cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  m = gmp::device_memory("cuda:0");
  check(m.external == before.external, "destroyed, the pool's line is gone (" + gmp::format_size(m.external) + ")");
  const std::int64_t drift = m.unattributed - before.unattributed;
  check(drift > -static_cast<std::int64_t>(2 * MiB) && drift < static_cast<std::int64_t>(2 * MiB),
        "unattributed stays where it was after the pool is gone (moved " + std::to_string(drift) + " bytes)");

  // Destroyed while still holding its reservation (no trim): the last figure must not stay.
  cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  cuda(cudaMallocFromPoolAsync(&p, 64 * MiB, pool, nullptr), "cudaMallocFromPoolAsync");
  cuda(cudaFreeAsync(p, nullptr), "cudaFreeAsync");
  cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  (void)gmp::device_memory("cuda:0");  // read once while it holds memory
  cuda(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
  m = gmp::device_memory("cuda:0");
  check(m.external == before.external,
        "a pool destroyed untrimmed leaves no line (" + gmp::format_size(m.external) + ")");
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--another-subscriber") return another_subscriber();
  if (gmp::cuda_device_count() == 0) {
    std::printf("no CUDA device visible (%s): skipped\n", gmp::cuda_unavailable_reason().c_str());
    return 77;
  }
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("CUDA_MODULE_LOADING=%s\n", loading != nullptr ? loading : "(default: lazy)");
  check(gmp::track_external_memory(), "tracking starts before any context exists");
  const int devices = gmp::cuda_device_count();

  // gpumemprof's own segments: counted as reserved, never as external.
  gmp::DeviceAllocator& alloc = gmp::default_allocator("cuda:0");
  void* own = alloc.allocate(64 * MiB);
  gmp::DeviceMemory m = gmp::device_memory("cuda:0");
  std::printf("%s", gmp::format_device_memory(m).c_str());
  check(m.context > 100 * MiB, "the context is measured (" + gmp::format_size(m.context) + ")");
  check(m.external == 0, "the allocator's own cudaMalloc is not external");

  // A direct cudaMalloc by the program.
  void* direct = nullptr;
  cuda(cudaMalloc(&direct, 100 * MiB), "cudaMalloc");
  m = gmp::device_memory("cuda:0");
  check(bytes_of(m.external_by_owner, program_owner()) == 100 * MiB,
        "a direct cudaMalloc of 100 MiB is held by " + program_owner());

  // A cudaMallocAsync pool: its reserved bytes under the program.
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  void* pooled = nullptr;
  cuda(cudaMallocAsync(&pooled, 32 * MiB, stream), "cudaMallocAsync");
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  m = gmp::device_memory("cuda:0");
  check(bytes_of(m.external_by_owner, program_owner()) >= 132 * MiB,
        "a cudaMallocAsync pool holding 32 MiB is counted under " + program_owner());

  // cuBLAS: a GEMM (workspace allocations and, lazily or eagerly, its kernels).
  if (void* blas = open_library("cuBLAS", {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})) {
    using Create = int (*)(void**);
    using Sgemm = int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                          const float*, float*, int);
    void* handle = nullptr;
    const int n = 1024;
    float* abc = nullptr;
    cuda(cudaMalloc(reinterpret_cast<void**>(&abc), 3 * sizeof(float) * n * n), "cudaMalloc (matrices)");
    const float one = 1.0f, zero = 0.0f;
    const bool ok = sym<Create>(blas, "cublasCreate_v2")(&handle) == 0 &&
                    sym<Sgemm>(blas, "cublasSgemm_v2")(handle, 0, 0, n, n, n, &one, abc, n, abc + n * n, n, &zero,
                                                       abc + 2 * n * n, n) == 0;
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(ok, "cublasCreate and a 1024x1024 SGEMM");
    m = gmp::device_memory("cuda:0");
    check(bytes_of(m.external_by_owner, "libcublas") + bytes_of(m.code_by_owner, "libcublas") > 0,
          "cuBLAS's workspace and code are held by libcublas*: " +
              gmp::format_size(bytes_of(m.external_by_owner, "libcublas")) + " allocated, " +
              gmp::format_size(bytes_of(m.code_by_owner, "libcublas")) + " code");
  }

  // cuDNN, when present.
  if (void* dnn = open_library("cuDNN", {"libcudnn.so.9", "libcudnn.so"})) {
    void* handle = nullptr;
    const bool ok = sym<int (*)(void**)>(dnn, "cudnnCreate")(&handle) == 0;
    cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(ok, "cudnnCreate");
    m = gmp::device_memory("cuda:0");
    check(bytes_of(m.external_by_owner, "libcudnn") + bytes_of(m.code_by_owner, "libcudnn") > 0,
          "cuDNN's memory is held by libcudnn*: " + gmp::format_size(bytes_of(m.external_by_owner, "libcudnn")) +
              " allocated, " + gmp::format_size(bytes_of(m.code_by_owner, "libcudnn")) + " code");
  }

  // NCCL: one communicator over every visible GPU, and an all-reduce so its buffers exist.
  if (void* nccl = open_library("NCCL", {"libnccl.so.2", "libnccl.so"})) {
    using InitAll = int (*)(void**, int, const int*);
    using AllReduce = int (*)(const void*, void*, std::size_t, int, int, void*, cudaStream_t);
    std::vector<void*> comms(static_cast<std::size_t>(devices));
    std::vector<int> list;
    for (int d = 0; d < devices; ++d) list.push_back(d);
    print_step("before ncclCommInitAll", devices);
    bool ok = sym<InitAll>(nccl, "ncclCommInitAll")(comms.data(), devices, list.data()) == 0;
    print_step("after ncclCommInitAll", devices);
    std::vector<float*> bufs(comms.size());
    std::vector<cudaStream_t> streams(comms.size());
    for (int d = 0; d < devices; ++d) {
      cuda(cudaSetDevice(d), "cudaSetDevice");
      cuda(cudaMalloc(reinterpret_cast<void**>(&bufs[d]), 4 * MiB), "cudaMalloc (all-reduce buffer)");
      cuda(cudaStreamCreate(&streams[d]), "cudaStreamCreate");
    }
    ok = ok && sym<int (*)()>(nccl, "ncclGroupStart")() == 0;
    for (int d = 0; ok && d < devices; ++d) {
      ok = sym<AllReduce>(nccl, "ncclAllReduce")(bufs[d], bufs[d], MiB, /*ncclFloat*/ 7, /*ncclSum*/ 0, comms[d],
                                                 streams[d]) == 0;
    }
    ok = ok && sym<int (*)()>(nccl, "ncclGroupEnd")() == 0;
    for (int d = 0; d < devices; ++d) {
      cuda(cudaSetDevice(d), "cudaSetDevice");
      cuda(cudaStreamSynchronize(streams[d]), "cudaStreamSynchronize (all-reduce)");
    }
    cuda(cudaSetDevice(0), "cudaSetDevice");
    print_step("after the first all-reduce", devices);
    check(ok, "an NCCL communicator over " + std::to_string(devices) + " GPU(s) and an all-reduce");
    for (int d = 0; d < devices; ++d) {
      const gmp::DeviceMemory md = gmp::device_memory(gmp::Device::cuda(d));
      check(bytes_of(md.external_by_owner, "libnccl.so") > 0,
            "NCCL's buffers on cuda:" + std::to_string(d) +
                " are held by libnccl.so: " + gmp::format_size(bytes_of(md.external_by_owner, "libnccl.so")) +
                " (code " + gmp::format_size(bytes_of(md.code_by_owner, "libnccl.so")) + ")");
    }
  }

  pitched_kinds();

  // Every device: the whole account, and what it leaves unexplained.
  print_capture();
  for (int d = 0; d < devices; ++d) {
    const gmp::DeviceMemory md = gmp::device_memory(gmp::Device::cuda(d));
    std::printf("%s", gmp::format_device_memory(md).c_str());
    const std::int64_t u = md.unattributed;
    check(u >= -static_cast<std::int64_t>(2 * MiB) && u <= static_cast<std::int64_t>(2 * MiB),
          "cuda:" + std::to_string(d) + ": unattributed within 2 MiB of zero (" + std::to_string(u) + " bytes)");
  }

  // Frees come off; the allocator's reserved bytes were never external.
  cuda(cudaFree(direct), "cudaFree");
  cuda(cudaFreeAsync(pooled, stream), "cudaFreeAsync");
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  m = gmp::device_memory("cuda:0");
  check(bytes_of(m.external_by_owner, program_owner()) < 132 * MiB, "the direct cudaMalloc's free is counted");
  check(m.reserved >= 64 * MiB, "the allocator's 64 MiB stay reserved, not external");
  alloc.deallocate(own);
  stacks_of_a_direct_malloc();
  own_pool_trimmed_and_destroyed();
  managed_and_pinned();
  another_profiler();
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
