// Device names, validation errors, and the simulated and host backends.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../units.hpp"
#include "catch.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/host.hpp"
#include "gpumemprof/device/simulated.hpp"

namespace gmp = gpumemprof;
using Catch::Matchers::Contains;

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
  const auto r = sim.reserve(24 * MiB, 2 * MiB);  // address space only: more than the capacity
  REQUIRE(r.size == 24 * MiB);
  CHECK(sim.map(r, 0, 6 * MiB));
  CHECK_FALSE(sim.map(r, 6 * MiB, 4 * MiB));  // would exceed 8 MiB
  CHECK(sim.mem_get_info().free == 2 * MiB);
  sim.unmap(r, 0, 6 * MiB);
  CHECK(sim.mem_get_info().free == 8 * MiB);
  CHECK_THROWS_AS(sim.map(r, 1, 2 * MiB), gmp::DeviceRuntimeError);  // misaligned
  sim.release(r);
}

TEST_CASE("simulated virtual memory: one physical allocation per page; no unmap of part of one") {
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{.capacity = GiB});
  CHECK_THROWS_WITH(sim.reserve(GiB, 3 * MiB), Contains("not a multiple of the mapping granularity"));
  const gmp::Reservation r = sim.reserve(90 * MiB, 20 * MiB);  // c10's large-pool page
  REQUIRE(r.size == 100 * MiB);                                // whole pages
  CHECK(r.page == 20 * MiB);
  REQUIRE(sim.map(r, 0, 40 * MiB));
  REQUIRE(sim.map(r, 60 * MiB, 20 * MiB));
  CHECK(sim.counters().physical_created == 3);
  CHECK(sim.physical_pages() == std::map<std::size_t, std::size_t>{{20 * MiB, 3}});
  CHECK_THROWS_WITH(sim.map(r, 20 * MiB, 40 * MiB), Contains("already mapped"));
  CHECK_THROWS_WITH(sim.map(r, 40 * MiB, 2 * MiB), Contains("not whole pages"));
  // The driver's rule: cuMemUnmap of part of a range mapped from one handle fails.
  CHECK_THROWS_WITH(sim.unmap(r, 0, 2 * MiB), Contains("part of a physical allocation"));
  CHECK_THROWS_WITH(sim.unmap(r, 2 * MiB, 18 * MiB), Contains("start inside"));
  CHECK_THROWS_WITH(sim.unmap(r, 0, 22 * MiB), Contains("end inside"));
  CHECK_THROWS_WITH(sim.unmap(r, 20 * MiB, 60 * MiB), Contains("not mapped"));  // a hole in the range
  CHECK(sim.mapped_bytes() == 60 * MiB);                                        // the refused unmaps changed nothing
  CHECK_THROWS_WITH(sim.release(r), Contains("still mapped"));
  sim.unmap(r, 0, 40 * MiB);  // two whole allocations at once
  CHECK(sim.counters().physical_released == 2);
  CHECK(sim.physical_pages() == std::map<std::size_t, std::size_t>{{20 * MiB, 1}});
  sim.unmap(r, 60 * MiB, 20 * MiB);
  CHECK(sim.physical_pages().empty());
  sim.release(r);
  // The allocation map lives with the reservation: a 2 MiB-page reservation unmaps page by page.
  const gmp::Reservation small = sim.reserve(8 * MiB, 2 * MiB);
  REQUIRE(sim.map(small, 0, 8 * MiB));
  CHECK(sim.physical_pages() == std::map<std::size_t, std::size_t>{{2 * MiB, 4}});
  sim.unmap(small, 2 * MiB, 2 * MiB);
  sim.unmap(small, 0, 2 * MiB);
  sim.unmap(small, 4 * MiB, 4 * MiB);
  sim.release(small);
  CHECK(sim.counters().physical_created == 7);
  CHECK(sim.counters().physical_released == 7);
}

TEST_CASE("simulated reservations past the device's first address range get ranges of their own") {
  // The range taken at construction holds eight times the capacity (less where the process has
  // less address space, as under ThreadSanitizer); a CUDA driver's address space is far larger,
  // so ten reservations of 9/8 of the device (one per stream and pool, as expandable segments
  // make them) must all succeed, and each still maps against the capacity.
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{.capacity = 64 * MiB});
  std::vector<gmp::Reservation> held;
  for (int i = 0; i < 10; ++i) {
    held.push_back(sim.reserve(72 * MiB, 2 * MiB));
    REQUIRE(held.back().size == 72 * MiB);
  }
  for (std::size_t i = 1; i < held.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {  // no two overlap
      CHECK((held[i].base + held[i].size <= held[j].base || held[j].base + held[j].size <= held[i].base));
    }
  }
  CHECK(sim.map(held.back(), 0, 64 * MiB));
  CHECK_FALSE(sim.map(held.front(), 0, 2 * MiB));                                            // the device is full
  static_cast<unsigned char*>(reinterpret_cast<void*>(held.back().base))[64 * MiB - 1] = 1;  // host memory
  sim.unmap(held.back(), 0, 64 * MiB);
  for (const auto& r : held) sim.release(r);
  CHECK(sim.reserve(72 * MiB, 2 * MiB).size == 72 * MiB);  // released ranges are reused
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
  CHECK_THROWS_AS(h.reserve(MiB, 2 * MiB), gmp::DeviceRuntimeError);
}

TEST_CASE("GPUMEMPROF_SIM_CAPACITY sets the simulated capacity; bad values are explained") {
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "16GiB", 1);
  CHECK(gmp::AnyBackend::for_device(gmp::Device::sim(1)).mem_get_info().total == 16ull << 30);
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "lots", 1);
  CHECK_THROWS_WITH(gmp::AnyBackend::for_device(gmp::Device::sim(1)), Contains("GPUMEMPROF_SIM_CAPACITY"));
  ::unsetenv("GPUMEMPROF_SIM_CAPACITY");
}

namespace {
/// How many pages of [p, p + bytes) are resident in RAM (mincore).
std::size_t resident_pages(const void* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  REQUIRE(::mincore(const_cast<void*>(p), bytes, in_core.data()) == 0);
  std::size_t n = 0;
  for (unsigned char c : in_core) n += c & 1u;
  return n;
}
}  // namespace

TEST_CASE("simulated memory is host memory committed lazily and given back when freed") {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  gmp::SimulatedBackend sim;  // the default 80 GiB, more than this machine's RAM
  CHECK(sim.capacity() == 80ull << 30);
  auto* p = static_cast<unsigned char*>(sim.malloc(8 * MiB));
  REQUIRE(p != nullptr);
  CHECK(resident_pages(p, 8 * MiB) == 0);  // nothing committed until touched
  std::memset(p, 0xab, 8 * MiB);
  CHECK(p[8 * MiB - 1] == 0xab);
  CHECK(resident_pages(p, 8 * MiB) == 8 * MiB / page);
  sim.free(p);
  CHECK(resident_pages(p, 8 * MiB) == 0);  // freed: RAM follows what is live
  auto* q = static_cast<unsigned char*>(sim.malloc(8 * MiB));
  REQUIRE(q == p);  // the same range again, fresh
  CHECK(q[0] == 0);
  sim.free(q);

  // The whole capacity can be handed out; only touched pages take RAM.
  void* all = sim.malloc(sim.capacity());
  REQUIRE(all != nullptr);
  static_cast<unsigned char*>(all)[sim.capacity() - 1] = 1;
  CHECK(resident_pages(all, sim.capacity()) >= 1);
  CHECK(resident_pages(all, sim.capacity()) <= (std::size_t{2} << 20) / page);  // at most one huge page
  sim.free(all);
}

TEST_CASE("mapped pages of a simulated reservation are host memory; unmapping gives them back") {
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{.capacity = 16 * MiB});
  const gmp::Reservation r = sim.reserve(8 * MiB, 2 * MiB);
  REQUIRE(r.base != 0);
  REQUIRE(sim.map(r, 2 * MiB, 4 * MiB));
  auto* p = reinterpret_cast<unsigned char*>(r.base + 2 * MiB);
  std::memset(p, 7, 4 * MiB);
  CHECK(resident_pages(p, 4 * MiB) > 0);
  sim.unmap(r, 2 * MiB, 4 * MiB);
  CHECK(resident_pages(p, 4 * MiB) == 0);
  sim.release(r);
}

TEST_CASE("GPUMEMPROF_SIM_CAPACITY sizes the host-addressable simulated memory") {
  ::setenv("GPUMEMPROF_SIM_CAPACITY", "64MiB", 1);
  auto b = gmp::AnyBackend::for_device(gmp::Device::sim(2));
  ::unsetenv("GPUMEMPROF_SIM_CAPACITY");
  CHECK(b.mem_get_info().total == 64 * MiB);
  void* p = b.malloc(64 * MiB);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 64 * MiB);
  CHECK(b.malloc(2 * MiB) == nullptr);  // the capacity still bounds it
  b.free(p);
}
