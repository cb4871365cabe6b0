// Device names, validation errors, and the simulated and host backends.
#include <cstdlib>
#include <string>

#include "catch.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/host.hpp"
#include "gpumemprof/device/simulated.hpp"

namespace gmp = gpumemprof;
using Catch::Matchers::Contains;
constexpr std::size_t MiB = std::size_t{1} << 20;

TEST_CASE("Device parses sim, host and validates indices") {
  CHECK(gmp::Device("sim:3").is_simulated());
  CHECK(gmp::Device("sim:3").index() == 3);
  CHECK(gmp::Device(" sim:0 ").str() == "sim:0");
  CHECK(gmp::Device("sim") == gmp::Device::sim(0));
  CHECK(gmp::Device("host").is_host());
  CHECK(gmp::Device(std::string("sim:7")).index() == 7);
  CHECK_THROWS_AS(gmp::Device("sim:8"), gmp::DeviceError);
  CHECK_THROWS_WITH(gmp::Device("sim:8"), Contains("sim:8") && Contains("available: ") && Contains("sim:0 ... sim:7"));
  CHECK_THROWS_WITH(gmp::Device("gpu0"), Contains("unknown device 'gpu0'") && Contains("cuda:N"));
  CHECK_THROWS_WITH(gmp::Device("cuda:x"), Contains("unknown device"));
  CHECK_THROWS_AS(gmp::Device("sim:-1"), std::invalid_argument);
}

TEST_CASE("CUDA devices that do not exist are named in the error") {
  const int n = gmp::cuda_device_count();
  const std::string spec = "cuda:" + std::to_string(n);  // one past the last
  CHECK_THROWS_WITH(gmp::Device(spec), Contains(spec) && Contains("available:"));
  CHECK_THROWS_AS(gmp::Device(n), gmp::DeviceError);
  if (n == 0) {
    CHECK_THROWS_WITH(gmp::Device(0), Contains("cuda:0") || Contains("'0'"));
    // No GPU: the current device is the first simulated one.
    ::unsetenv("GPUMEMPROF_DEVICE");
    CHECK(gmp::Device() == gmp::Device::sim(0));
  }
}

TEST_CASE("GPUMEMPROF_DEVICE chooses the current device") {
  ::setenv("GPUMEMPROF_DEVICE", "sim:5", 1);
  CHECK(gmp::Device() == gmp::Device::sim(5));
  CHECK(gmp::Device("auto") == gmp::Device::sim(5));
  ::setenv("GPUMEMPROF_DEVICE", "bogus", 1);
  CHECK_THROWS_WITH(gmp::Device(), Contains("GPUMEMPROF_DEVICE"));
  ::unsetenv("GPUMEMPROF_DEVICE");
}

TEST_CASE("simulated backend: capacity, distinct aligned addresses, counters") {
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{.capacity = 10 * MiB});
  CHECK(sim.name() == "sim:0");
  void* a = sim.malloc(3 * MiB);  // charged 4 MiB (2 MiB granularity)
  void* b = sim.malloc(4 * MiB);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % (2 * MiB) == 0);
  CHECK(a != b);
  CHECK(sim.mem_get_info().free == 2 * MiB);
  CHECK(sim.mem_get_info().total == 10 * MiB);
  CHECK(sim.malloc(4 * MiB) == nullptr);  // out of memory: nullptr, not a throw
  sim.set_external_usage(2 * MiB);
  CHECK(sim.mem_get_info().free == 0);
  sim.set_external_usage(0);
  sim.free(a);
  CHECK(sim.mem_get_info().free == 6 * MiB);
  CHECK_THROWS_AS(sim.free(a), gmp::DeviceRuntimeError);
  const auto c = sim.counters();
  CHECK(c.malloc_calls == 3);
  CHECK(c.malloc_failures == 1);
  CHECK(c.free_calls == 1);
  sim.free(b);
  CHECK(sim.used_bytes() == 0);
}

TEST_CASE("simulated events complete when the test says so, in stream order") {
  gmp::SimulatedBackend sim;
  const gmp::Stream s1(1), s2(2);
  const auto e1 = sim.record_event(s1);
  const auto e2 = sim.record_event(s1);
  const auto e3 = sim.record_event(s2);
  CHECK_FALSE(sim.query_event(e1));
  sim.complete_events(s1);
  CHECK(sim.query_event(e1));
  CHECK(sim.query_event(e2));
  CHECK_FALSE(sim.query_event(e3));
  sim.synchronize_event(e3);  // waiting completes it
  CHECK(sim.query_event(e3));
  for (auto e : {e1, e2, e3}) sim.release_event(e);
  CHECK_THROWS_AS(sim.query_event(e1), gmp::DeviceRuntimeError);

  gmp::SimulatedBackend autos(gmp::SimulatedOptions{.auto_complete_events = true});
  CHECK(autos.query_event(autos.record_event(s1)));
}

TEST_CASE("simulated virtual memory: reserve, map, unmap against the capacity") {
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{.capacity = 8 * MiB});
  const auto r = sim.reserve(24 * MiB);  // address space only: more than the capacity
  REQUIRE(r.size == 24 * MiB);
  CHECK(sim.map(r, 0, 6 * MiB));
  CHECK_FALSE(sim.map(r, 6 * MiB, 4 * MiB));  // would exceed 8 MiB
  CHECK(sim.mem_get_info().free == 2 * MiB);
  sim.unmap(r, 0, 6 * MiB);
  CHECK(sim.mem_get_info().free == 8 * MiB);
  CHECK_THROWS_AS(sim.map(r, 1, 2 * MiB), gmp::DeviceRuntimeError);  // misaligned
  sim.release(r);
}

TEST_CASE("host backend hands out real, aligned memory") {
  gmp::HostBackend host;
  auto* p = static_cast<unsigned char*>(host.malloc(4096));
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
  p[0] = 1;
  p[4095] = 2;
  host.free(p);
  CHECK(host.mem_get_info().total > 0);
  CHECK(host.query_event(host.record_event(gmp::Stream(1))));
}

TEST_CASE("AnyBackend wraps a backend chosen from a Device") {
  auto b = gmp::AnyBackend::for_device(gmp::Device::sim(2));
  CHECK(b.name() == "sim:2");
  CHECK(b.index() == 2);
  CHECK(b.supports_virtual_memory());
  REQUIRE(b.target<gmp::SimulatedBackend>() != nullptr);
  CHECK(b.target<gmp::HostBackend>() == nullptr);
  void* p = b.malloc(MiB);
  CHECK(b.target<gmp::SimulatedBackend>()->used_bytes() == 2 * MiB);
  b.free(p);
  auto h = gmp::AnyBackend::for_device(gmp::Device::host());
  CHECK_FALSE(h.supports_virtual_memory());
  CHECK_THROWS_AS(h.reserve(MiB), gmp::DeviceRuntimeError);
}

TEST_CASE("GPUMEMPROF_SIM_CAPACITY sets the simulated capacity; bad values are explained") {
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "16GiB", 1);
  CHECK(gmp::AnyBackend::for_device(gmp::Device::sim(1)).mem_get_info().total == 16ull << 30);
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "lots", 1);
  CHECK_THROWS_WITH(gmp::AnyBackend::for_device(gmp::Device::sim(1)), Contains("GPUMEMPROF_SIM_CAPACITY"));
  ::unsetenv("GPUMEMPROF_SIM_CAPACITY");
}
