// The torch.cuda.*-style free functions over the per-device default allocators.
#include "catch.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "sim_allocator.hpp"

TEST_CASE("free functions read and reset the default allocator of a device") {
  const gmp::Device dev("sim:3");
  auto& a = gmp::default_allocator(dev);
  CHECK(&a == &gmp::default_allocator("sim:3"));  // one allocator per device
  CHECK(&a != &gmp::default_allocator("sim:4"));
  CHECK(a.device_name() == "sim:3");
  void* big = a.allocate(30 * MiB);
  void* small = a.allocate(1000);
  CHECK(gmp::memory_allocated(dev) == static_cast<std::int64_t>(30 * MiB + 1024));
  CHECK(gmp::memory_reserved(dev) == static_cast<std::int64_t>(32 * MiB));
  a.deallocate(big);
  CHECK(gmp::memory_allocated(dev) == 1024);
  CHECK(gmp::max_memory_allocated(dev) == static_cast<std::int64_t>(30 * MiB + 1024));
  CHECK(gmp::max_memory_reserved(dev) == static_cast<std::int64_t>(32 * MiB));
  CHECK(gmp::memory_stats(dev).allocation.all().current == 1);
  gmp::reset_peak_memory_stats(dev);
  CHECK(gmp::max_memory_allocated(dev) == 1024);
  gmp::empty_cache(dev);  // the 30 MiB segment goes back; the small one holds a live block
  CHECK(gmp::memory_reserved(dev) == static_cast<std::int64_t>(2 * MiB));
  CHECK(gmp::max_memory_reserved(dev) == static_cast<std::int64_t>(32 * MiB));  // peaks are not reset by empty_cache
  CHECK(gmp::device_memory_used(dev) == 2 * MiB);  // the simulated device's own account
  a.backend().target<gmp::SimulatedBackend>()->set_external_usage(5 * MiB);
  CHECK(gmp::device_memory_used(dev) == 7 * MiB);  // includes memory the allocator does not own
  a.backend().target<gmp::SimulatedBackend>()->set_external_usage(0);
  gmp::reset_accumulated_memory_stats(dev);
  CHECK(gmp::memory_stats(dev).allocation.all().allocated == 0);
  a.deallocate(small);
  gmp::set_per_process_memory_fraction(0.5, dev);  // 40 of the default 80 GiB
  CHECK_THROWS_AS(a.allocate(41ull << 30), gmp::OutOfMemoryError);
  void* ok = a.allocate(39ull << 30);
  a.deallocate(ok);
  gmp::set_per_process_memory_fraction(1.0, dev);
  a.validate();
}

TEST_CASE("free functions reject unknown devices") {
  CHECK_THROWS_AS(gmp::memory_allocated("sim:9"), gmp::DeviceError);
  CHECK_THROWS_AS(gmp::empty_cache("nope"), gmp::DeviceError);
}
