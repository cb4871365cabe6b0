// Every byte on a device: the ledger of memory outside the allocator, the simulated device's
// external allocations and context, and device_memory() putting them beside the allocator.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "sim_allocator.hpp"

using Catch::Matchers::Contains;

namespace {

SimAllocator make_device(std::size_t capacity, std::size_t context) {
  gmp::SimulatedOptions opt;
  opt.capacity = capacity;
  opt.context_bytes = context;
  return SimAllocator(gmp::SimulatedBackend(opt));
}

/// What `f` writes to stderr.
template <class F>
std::string stderr_of(F f) {
  std::fflush(stderr);
  char path[] = "/tmp/gpumemprof_stderr_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  return out;
}

}  // namespace

TEST_CASE("the ledger keeps live allocations by owner with the site holding the most") {
  gmp::ExternalLedger ledger;
  ledger.record_alloc(0x1000, 100, "libnccl.so", "ncclCommInitRank");
  ledger.record_alloc(0x2000, 300, "libnccl.so", "ncclProxyConnect");
  ledger.record_alloc(0x3000, 50, "libnccl.so", "ncclCommInitRank");
  ledger.record_alloc(0x4000, 1000, "app", "main");
  gmp::ExternalMemory m = ledger.view();
  CHECK(m.allocations == 1450);
  REQUIRE(m.by_owner.size() == 2);
  CHECK(m.by_owner[0] == gmp::OwnerMemory{"app", 1000, 1, "main", {}});
  CHECK(m.by_owner[1] == gmp::OwnerMemory{"libnccl.so", 450, 3, "ncclProxyConnect", {}});

  CHECK(ledger.record_free(0x2000));
  CHECK_FALSE(ledger.record_free(0x2000));  // twice: ignored
  CHECK_FALSE(ledger.record_free(0x9000));  // allocated before tracking: ignored, never negative
  m = ledger.view();
  CHECK(m.allocations == 1150);
  CHECK(m.by_owner[1] == gmp::OwnerMemory{"libnccl.so", 150, 2, "ncclCommInitRank", {}});

  ledger.record_alloc(0x4000, 10, "libcublas.so", "cublasCreate_v2");  // the same id again: replaces
  CHECK(ledger.bytes_of(0x4000) == 10);
  m = ledger.view();
  CHECK(m.allocations == 160);
  CHECK(m.by_owner[0].owner == "libnccl.so");
  CHECK(m.by_owner[1] == gmp::OwnerMemory{"libcublas.so", 10, 1, "cublasCreate_v2", {}});

  ledger.record_code(7, 64 << 20, "libcublas.so");
  ledger.record_code(8, 2 << 20, "app");
  ledger.set_context(500 << 20);
  m = ledger.view();
  CHECK(m.code == (66u << 20));
  REQUIRE(m.code_by_owner.size() == 2);
  CHECK(m.code_by_owner[0] == gmp::OwnerMemory{"libcublas.so", 64u << 20, 1, "", {}});
  CHECK(ledger.record_code_unload(7));
  CHECK_FALSE(ledger.record_code_unload(7));
  CHECK(ledger.view().code == (2u << 20));
  CHECK(ledger.view().context == (500u << 20));
  ledger.clear();
  CHECK(ledger.view().allocations == 0);
  CHECK(ledger.view().by_owner.empty());
}

TEST_CASE("the simulated device's context and external allocations take its memory") {
  SimAllocator a = make_device(80 * GiB, 2150 * MiB);
  gmp::SimulatedBackend& sim = a.backend();
  CHECK(sim.mem_get_info().free == 80 * GiB - 2150 * MiB);  // the context, from the start

  void* nccl1 = sim.external_malloc(10 * GiB, "libnccl.so", "ncclCommInitRank");
  void* nccl2 = sim.external_malloc(4 * GiB, "libnccl.so", "ncclProxyConnect");
  void* blas = sim.external_malloc(1000, "libcublas.so", "cublasCreate_v2");  // charged one 2 MiB granule
  REQUIRE(nccl1 != nullptr);
  REQUIRE(blas != nullptr);
  CHECK(sim.mem_get_info().free == 80 * GiB - 2150 * MiB - 14 * GiB - 2 * MiB);
  CHECK(sim.used_bytes() == 0);                                   // the allocator's own account is untouched
  CHECK(sim.external_malloc(64 * GiB, "libnccl.so") == nullptr);  // no room: like cudaMalloc failing

  void* p = a.allocate(61 * GiB);
  const gmp::DeviceMemory m = gmp::device_memory(a);
  CHECK(m.device == "sim:0");
  CHECK(m.total == 80 * GiB);
  CHECK(m.used == 61 * GiB + 14 * GiB + 2 * MiB + 2150 * MiB);
  CHECK(m.allocated == 61 * GiB);
  CHECK(m.reserved == 61 * GiB);
  CHECK(m.external == 14 * GiB + 1000);
  REQUIRE(m.external_by_owner.size() == 2);
  CHECK(m.external_by_owner[0] == gmp::OwnerMemory{"libnccl.so", 14 * GiB, 2, "ncclCommInitRank", {}});
  CHECK(m.external_by_owner[1] == gmp::OwnerMemory{"libcublas.so", 1000, 1, "cublasCreate_v2", {}});
  CHECK(m.context == 2150 * MiB);
  CHECK(m.code == 0);
  CHECK(m.tracking);
  CHECK(m.unattributed == static_cast<std::int64_t>(2 * MiB - 1000));  // the granule's rounding

  // The allocator runs out because of the external memory: 80 - 2.1 - 14 - 61 leaves < 3 GiB.
  CHECK_THROWS_AS(a.allocate(3 * GiB), gmp::OutOfMemoryError);
  sim.external_free(nccl2);
  void* q = a.allocate(3 * GiB);  // fits once NCCL gave its 4 GiB back
  CHECK(gmp::device_memory(a).external_by_owner[0] ==
        gmp::OwnerMemory{"libnccl.so", 10 * GiB, 1, "ncclCommInitRank", {}});
  CHECK_THROWS_AS(sim.external_free(nccl2), gmp::DeviceRuntimeError);  // twice
  CHECK_THROWS_AS(sim.external_free(p), gmp::DeviceRuntimeError);      // not an external allocation
  sim.external_free(nccl1);
  sim.external_free(blas);
  const gmp::DeviceMemory after = gmp::device_memory(a);
  CHECK(after.external == 0);
  CHECK(after.external_by_owner.empty());
  CHECK(after.unattributed == 0);
  a.deallocate(p);
  a.deallocate(q);
  a.validate();
}

TEST_CASE("sim_external_malloc reaches the default allocator's device; GPUMEMPROF_SIM_CONTEXT sizes its context") {
  ::setenv("GPUMEMPROF_SIM_CONTEXT", "512MiB", 1);
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "16GiB", 1);
  const gmp::Device dev("sim:6");
  void* buf = gmp::sim_external_malloc(dev, 3 * GiB, "libnccl.so", "ncclCommInitRank");
  ::unsetenv("GPUMEMPROF_SIM_CONTEXT");
  ::unsetenv("GPUMEMPROF_SIM_CAPACITY");
  REQUIRE(buf != nullptr);
  void* p = gmp::default_allocator(dev).allocate(20 * MiB);
  gmp::DeviceMemory m = gmp::device_memory(dev);
  CHECK(m.total == 16 * GiB);
  CHECK(m.used == 512 * MiB + 3 * GiB + 20 * MiB);
  CHECK(m.context == 512 * MiB);
  CHECK(m.external == 3 * GiB);
  CHECK(m.reserved == 20 * MiB);
  CHECK(m.unattributed == 0);
  CHECK(gmp::device_memory_used(dev) == m.used);
  CHECK(gmp::describe_outside_allocator(m) == "3.00 GiB held by libnccl.so, 512.00 MiB CUDA context");
  CHECK(gmp::format_device_memory(m) ==
        "device sim:6: 3.52 GiB used of 16.00 GiB (the driver's count)\n"
        "  allocator reserved      20.00 MiB  (20.00 MiB allocated, 0 bytes cached)\n"
        "  external allocations    3.00 GiB\n"
        "    libnccl.so            3.00 GiB  in 1 allocation, most from ncclCommInitRank\n"
        "  CUDA context            512.00 MiB\n"
        "  unattributed            0 bytes\n");
  gmp::sim_external_free(dev, buf);
  gmp::default_allocator(dev).deallocate(p);
  CHECK(gmp::device_memory(dev).external == 0);

  CHECK_THROWS_AS(gmp::sim_external_malloc("host", MiB, "x"), gmp::DeviceError);
  ::setenv("GPUMEMPROF_SIM_CONTEXT", "lots", 1);
  CHECK_THROWS_AS(gmp::device_memory("sim:7"), gmp::ConfigError);  // read where the allocator is made
  ::setenv("GPUMEMPROF_SIM_CONTEXT", "100GiB", 1);
  CHECK_THROWS_WITH(gmp::device_memory("sim:7"), Contains("larger than the device"));
  ::unsetenv("GPUMEMPROF_SIM_CONTEXT");
  CHECK(gmp::device_memory("sim:7").context == 0);
}

TEST_CASE("a device without a ledger reports everything it does not reserve as unattributed") {
  SimAlloc s;
  s.sim().set_external_usage(6 * MiB);  // another process
  const gmp::DeviceMemory m = gmp::device_memory(s.a);
  CHECK(m.external == 0);
  CHECK(m.unattributed == static_cast<std::int64_t>(6 * MiB));
  CHECK(gmp::describe_outside_allocator(m) == "6.00 MiB unattributed");
}

TEST_CASE("tracking memory outside the allocator says in one line why it cannot start, and changes nothing else") {
  const bool can = GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI && gmp::cuda_device_count() > 0;
  if (can) {
    WARN("a CUDA device is visible: tests/gpu/test_external_memory checks the capture");
    return;
  }
  bool first = true, second = true;
  const std::string said = stderr_of([&] {
    first = gmp::track_external_memory();
    second = gmp::track_external_memory();  // asked again: the same answer, said once
  });
  CHECK_FALSE(first);
  CHECK_FALSE(second);
  const std::string why = GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI ? gmp::cuda_unavailable_reason()
                          : GPUMEMPROF_WITH_CUDA ? "this build has no CUPTI (configure with CUDA and -Dcupti=enabled)"
                                                 : "this build has no CUDA (configure with CUDA and -Dcupti=enabled)";
  CHECK(said == "gpumemprof: memory outside the allocator is not tracked: " + why + "\n");
  SimAllocator a = make_device(GiB, 0);
  void* p = a.allocate(MiB);
  CHECK(gmp::device_memory(a).reserved == 2 * MiB);
  a.deallocate(p);
}

namespace {
GPUMEMPROF_NOINLINE void* external_from_here(gmp::SimulatedBackend& sim, std::size_t bytes) {
  void* p = sim.external_malloc(bytes, "libnccl.so");
  asm volatile("" : : "r"(p) : "memory");  // no tail call: this frame stays on the stack
  return p;
}
GPUMEMPROF_NOINLINE void* external_from_there(gmp::SimulatedBackend& sim, std::size_t bytes) {
  void* p = sim.external_malloc(bytes, "libnccl.so");
  asm volatile("" : : "r"(p) : "memory");
  return p;
}
}  // namespace

TEST_CASE("with stacks, external allocations of one owner are told apart by call stack") {
  SimAllocator a = make_device(GiB, 0);
  gmp::SimulatedBackend& sim = a.backend();
  void* plain = sim.external_malloc(4 * MiB, "libnccl.so");  // stacks off: no stack, one site ""
  CHECK(gmp::device_memory(a).external_by_owner[0].top_stack.empty());
  sim.external_free(plain);

  (void)gmp::track_external_memory({.stacks = true});  // on a simulated device, stacks need no CUPTI
  void* here = external_from_here(sim, 6 * MiB);
  void* there_ptrs[2] = {};
  volatile int there_count = 2;  // unknown to the compiler: -O2 cannot unroll the loop into two call sites
  for (int i = 0; i < there_count; ++i) there_ptrs[i] = external_from_there(sim, 4 * MiB);  // one call site, one stack
  auto [there1, there2] = there_ptrs;
  gmp::DeviceMemory m = gmp::device_memory(a);
  REQUIRE(m.external_by_owner.size() == 1);
  const gmp::OwnerMemory there = m.external_by_owner[0];
  CHECK(there.bytes == 14 * MiB);
  CHECK(there.count == 3);
  REQUIRE_FALSE(there.top_stack.empty());            // "there" holds 8 MiB from one stack, "here" 6
  CHECK(there.top_site == there.top_stack.front());  // no site name given: the stack's first frame
  sim.external_free(there1);                         // now "here" holds the most
  m = gmp::device_memory(a);
  REQUIRE_FALSE(m.external_by_owner[0].top_stack.empty());
  CHECK(m.external_by_owner[0].top_stack != there.top_stack);
  CHECK(m.external_by_owner[0].top_stack.size() == there.top_stack.size());  // the same depth, another caller
  sim.external_free(there2);
  sim.external_free(here);
  gmp::detail::external_stacks.store(false);  // stacks stay on in a program; not across these tests
  CHECK(gmp::device_memory(a).external == 0);
}

// Issue 29: a program's own memory pool (cudaMemPoolCreate) that allocated 200 MiB, freed it,
// trimmed to 0 and was destroyed still showed 224 MiB under its owner, and unattributed -224 MiB.
TEST_CASE("a memory pool of the program's own: its reservation while it holds one, nothing once trimmed or destroyed") {
  SimAllocator a = make_device(8 * GiB, 0);
  gmp::SimulatedBackend& sim = a.backend();
  const std::uint64_t pool = sim.external_pool_create("app", "cudaMemPoolCreate");
  void* p = sim.external_pool_malloc(pool, 200 * MiB);
  REQUIRE(p != nullptr);
  gmp::DeviceMemory m = gmp::device_memory(a);
  REQUIRE(m.external_by_owner.size() == 1);
  CHECK(m.external_by_owner[0] == gmp::OwnerMemory{"app", 224 * MiB, 1, "cudaMemPoolCreate", {}});  // 7 granules
  CHECK(m.used == 224 * MiB);
  CHECK(m.unattributed == 0);
  sim.external_pool_free(pool, p);
  CHECK(gmp::device_memory(a).external == 224 * MiB);  // a pool keeps what it reserved
  sim.external_pool_trim(pool, 0);
  m = gmp::device_memory(a);
  CHECK(m.external_by_owner.empty());
  CHECK(m.used == 0);
  CHECK(m.unattributed == 0);
  sim.external_pool_destroy(pool);
  m = gmp::device_memory(a);
  CHECK(m.external_by_owner.empty());
  CHECK(m.unattributed == 0);

  // Destroyed without a trim, holding memory: all of it goes, and its line with it.
  const std::uint64_t pool2 = sim.external_pool_create("app", "cudaMemPoolCreate");
  void* q = sim.external_pool_malloc(pool2, 40 * MiB);
  void* r = sim.external_pool_malloc(pool2, 40 * MiB);
  REQUIRE(r != nullptr);
  CHECK(gmp::device_memory(a).external == 96 * MiB);
  sim.external_pool_free(pool2, q);
  sim.external_pool_trim(pool2, 0);  // r is still live: 64 MiB stay
  CHECK(gmp::device_memory(a).external == 64 * MiB);
  sim.external_pool_destroy(pool2);
  m = gmp::device_memory(a);
  CHECK(m.external == 0);
  CHECK(m.used == 0);
  CHECK(m.unattributed == 0);
  CHECK_THROWS_AS(sim.external_pool_destroy(pool2), gmp::DeviceRuntimeError);
  CHECK(sim.external_pool_malloc(sim.external_pool_create("app"), 16 * GiB) == nullptr);  // no room to grow
  a.validate();
}

TEST_CASE("an owner's stack ends at main: the C library's start-up frames are left out") {
  std::vector<std::string> named = {"ncclInit",          "train at app.cpp:12", "main at app.cpp:40",
                                    "libc.so.6+0x2a1c9", "__libc_start_main",   "_start"};
  gmp::detail::drop_startup_frames(named);
  CHECK(named == std::vector<std::string>{"ncclInit", "train at app.cpp:12", "main at app.cpp:40"});
  // main not exported (dladdr names the binary and an offset): cut at libc's frames.
  std::vector<std::string> plain = {"cudaMalloc",        "app+0x1234",        "app+0x1100",
                                    "libc.so.6+0x2a1c9", "__libc_start_main", "_start"};
  gmp::detail::drop_startup_frames(plain);
  CHECK(plain == std::vector<std::string>{"cudaMalloc", "app+0x1234", "app+0x1100"});
  std::vector<std::string> none = {"worker", "start_thread", "clone3"};  // a thread's stack: unchanged
  gmp::detail::drop_startup_frames(none);
  CHECK(none.size() == 3);
  std::vector<std::string> mainly = {"mainloop", "main"};  // only a frame named exactly main ends it
  gmp::detail::drop_startup_frames(mainly);
  CHECK(mainly.size() == 2);
}
