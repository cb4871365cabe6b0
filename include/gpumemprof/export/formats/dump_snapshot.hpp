// Layer 5: torch.cuda.memory._dump_snapshot -- a snapshot written to a file (pickle, or JSON
// for a ".json" path), atomically: a failed write leaves any old file intact and throws
// IoError naming the path and the reason.
//
//   gmp::record_memory_history();
//   ...
//   gmp::dump_snapshot("mem.pickle");            // open in pytorch.org/memory_viz
//   gmp::dump_snapshot_on_oom(alloc, "oom.pickle");   // the state at the next OOM, automatically
#pragma once

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Writes `allocator.snapshot()` to `path`.
template <DeviceBackend B>
void dump_snapshot(const CachingAllocator<B>& allocator, const std::string& path) {
  write_snapshot_file(allocator.snapshot(), path);
}

/// Writes the snapshot of the default allocator of `device` to `path`.
inline void dump_snapshot(const std::string& path, const Device& device = Device()) {
  dump_snapshot(default_allocator(device), path);
}

/// Writes one snapshot of every device in `devices` to `path` (snapshot_devices: one
/// device_traces list per device, the segments of all), as PyTorch dumps a multi-GPU process.
inline void dump_snapshot_devices(const std::string& path, const std::vector<Device>& devices) {
  write_snapshot_file(snapshot_devices(devices), path);
}

/// At every OOM of `allocator`, writes its snapshot to `path` (replacing the previous one)
/// before OutOfMemoryError reaches the caller. A failed write is reported on stderr; the OOM
/// is thrown either way.
template <DeviceBackend B>
void dump_snapshot_on_oom(CachingAllocator<B>& allocator, std::string path) {
  allocator.attach_oom_observer([&allocator, path = std::move(path)](const OomInfo&) {
    try {
      dump_snapshot(allocator, path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumemprof: could not write the OOM snapshot: %s\n", e.what());
    }
  });
}

GPUMEMPROF_NAMESPACE_END
