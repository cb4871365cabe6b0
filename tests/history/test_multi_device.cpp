// Several devices in one process: one thread per device, each on its own device's default
// allocator (sim:0..3), and one snapshot of every device, as PyTorch writes a multi-GPU process.
#include <cstdint>
#include <sstream>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/gpumemprof.hpp"

namespace gmp = gpumemprof;
using namespace gmp::literals;

TEST_CASE("one thread per device: each device's allocator sees only its own work, and one file holds every device") {
  constexpr int kDevices = 4;
  constexpr int kSteps = 2000;
  std::vector<gmp::Device> devices;
  for (int d = 0; d < kDevices; ++d) {
    devices.push_back(gmp::Device::sim(d));
    gmp::default_allocator(devices.back()).empty_cache();
    gmp::reset_peak_memory_stats(devices.back());
    gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all}, devices.back());
  }
  std::vector<std::thread> threads;
  std::vector<void*> kept(kDevices, nullptr);
  for (int d = 0; d < kDevices; ++d) {
    threads.emplace_back([d, &devices, &kept] {
      auto& alloc = gmp::default_allocator(devices[static_cast<std::size_t>(d)]);
      kept[static_cast<std::size_t>(d)] = alloc.allocate(static_cast<std::size_t>(d + 1) * 32_MiB);  // device d's peak
      for (int i = 0; i < kSteps; ++i) alloc.deallocate(alloc.allocate(static_cast<std::size_t>(d + 1) * 4_KiB));
    });
  }
  for (std::thread& t : threads) t.join();

  for (int d = 0; d < kDevices; ++d) {
    auto& alloc = gmp::default_allocator(devices[static_cast<std::size_t>(d)]);
    alloc.validate();
    const gmp::MemoryStats s = alloc.memory_stats();
    const auto big = static_cast<std::int64_t>((d + 1) * 32_MiB);
    CHECK(s.allocated_bytes.all().current == big);
    CHECK(s.allocated_bytes.all().peak == big + static_cast<std::int64_t>((d + 1) * 4_KiB));
    CHECK(s.allocation.all().allocated == kSteps + 1);
    CHECK(s.reserved_bytes.all().current == big + static_cast<std::int64_t>(2_MiB));  // + one small segment
  }

  const gmp::Snapshot snap = gmp::snapshot_devices(devices);
  REQUIRE(snap.device_traces.size() == kDevices);
  std::vector<int> segments_of(kDevices, 0);
  for (const gmp::SnapshotSegment& seg : snap.segments) ++segments_of.at(static_cast<std::size_t>(seg.device));
  for (int d = 0; d < kDevices; ++d) {
    CHECK(segments_of[static_cast<std::size_t>(d)] == 2);
    // segment_alloc x2, alloc of the kept block, kSteps x (alloc, free_requested, free_completed), snapshot.
    CHECK(snap.device_traces[static_cast<std::size_t>(d)].size() == static_cast<std::size_t>(3 + 3 * kSteps + 1));
    for (const gmp::TraceEntry& e : snap.device_traces[static_cast<std::size_t>(d)]) {
      if (e.action == gmp::TraceAction::alloc && e.size < 1_MiB) {
        REQUIRE(e.size == static_cast<std::uint64_t>(d + 1) * 4_KiB);  // no other device's work
      }
    }
  }
  std::ostringstream os;
  gmp::write_snapshot(snap, os);
  const gmp::Snapshot back = gmp::parse_snapshot(os.str(), "devices.pickle");
  CHECK(back.segments.size() == snap.segments.size());
  REQUIRE(back.device_traces.size() == kDevices);
  CHECK(back.device_traces[3].size() == snap.device_traces[3].size());

  CHECK_THROWS_WITH(gmp::snapshot_devices({gmp::Device::sim(1), gmp::Device::sim(1)}),
                    Catch::Matchers::Contains("two devices with index 1"));
  for (int d = 0; d < kDevices; ++d) {
    auto& alloc = gmp::default_allocator(devices[static_cast<std::size_t>(d)]);
    alloc.deallocate(kept[static_cast<std::size_t>(d)]);
    alloc.validate();
    gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, devices[static_cast<std::size_t>(d)]);
  }
}
