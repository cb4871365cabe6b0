// The bridge's exported malloc/free as PyTorch calls them (python/gpumemprof_torch.cpp, compiled
// into this test), on allocators over simulated devices put where the bridge looks for cuda:0 and
// cuda:1. The CUDA runtime's device count is this file's own (two devices, every call counted):
// after a device's first call, allocations and frees ask the runtime nothing (before, each call
// built Device::cuda(N), one cudaGetDeviceCount each) and reach the same allocator.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof_torch.h"

namespace gmp = gpumemprof;

namespace {
std::atomic<int> device_count_calls{0};

// Puts allocators over simulated devices into the default slots of cuda:0 (default policy) and
// cuda:1 (expandable segments), once.
void simulated_cuda_devices() {
  static const bool done = [] {
    const auto put = [](int index, const char* conf) {
      gmp::SimulatedOptions opt;
      opt.capacity = 8 * GiB;
      opt.index = index;
      gmp::detail::default_allocator_slots().cuda[static_cast<std::size_t>(index)].allocator.store(
          new gmp::DeviceAllocator(gmp::AnyBackend(gmp::SimulatedBackend(opt)), gmp::AllocatorConfig::parse(conf)));
    };
    put(0, "");
    put(1, "expandable_segments:True");
    return true;
  }();
  (void)done;
}

gmp::DeviceAllocator& slot(int index) {
  return *gmp::detail::default_allocator_slots().cuda[static_cast<std::size_t>(index)].allocator.load();
}
}  // namespace

// This program's device count: two GPUs, each call counted (the runtime's own is not reached from
// the code linked into this program).
extern "C" cudaError_t cudaGetDeviceCount(int* count) {
  device_count_calls.fetch_add(1);
  *count = 2;
  return cudaSuccess;
}

TEST_CASE("bridge entry: after a device's first call, malloc and free ask the CUDA runtime nothing") {
  simulated_cuda_devices();
  gpumemprof_raise_on_error(1);
  for (int device : {0, 1}) {
    void* first = gpumemprof_malloc(4096, device, nullptr);  // the device's first use (maybe)
    REQUIRE(first != nullptr);
    gpumemprof_free(first, 4096, device, nullptr);
    const int before = device_count_calls.load();
    std::vector<void*> live;
    for (std::size_t bytes : {std::size_t{512}, std::size_t{3} * MiB, std::size_t{1} << 20, std::size_t{70000}}) {
      live.push_back(gpumemprof_malloc(static_cast<ssize_t>(bytes), device, nullptr));
      REQUIRE(live.back() != nullptr);
    }
    CHECK(slot(device).memory_stats().allocation.all().current == 4);  // the allocator in the slot served them
    for (void* p : live) gpumemprof_free(p, 0, device, nullptr);
    CHECK(device_count_calls.load() == before);
    CHECK(slot(device).memory_stats().allocation.all().current == 0);
    CHECK(std::string(gpumemprof_last_error()).empty());
    slot(device).validate();
  }
  int devices[4] = {};
  CHECK(gpumemprof_devices_in_use(devices, 4) == 2);
  CHECK(devices[0] == 0);
  CHECK(devices[1] == 1);
}

TEST_CASE("bridge entry: an index no device has fails with one message, never throws") {
  simulated_cuda_devices();
  gpumemprof_raise_on_error(0);
  for (int device : {-1, 2, 64, 1000}) {
    CHECK(gpumemprof_malloc(4096, device, nullptr) == nullptr);
    CHECK(std::strstr(gpumemprof_last_error(), "no CUDA device") != nullptr);
  }
  gpumemprof_raise_on_error(1);
  CHECK_THROWS(gpumemprof_malloc(4096, 5, nullptr));
}
