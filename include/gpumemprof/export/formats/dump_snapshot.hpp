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

/// Writes `snapshot(allocator)` (history/snapshot_builder.hpp) to `path`.
template <DeviceBackend B>
void dump_snapshot(const CachingAllocator<B>& allocator, const std::string& path) {
  write_snapshot_file(gpumemprof::snapshot(allocator), path);
}

/// Writes the snapshot of the default allocator of `device` to `path`.
void dump_snapshot(const std::string& path, const Device& device = Device());

/// Writes one snapshot of every device in `devices` to `path` (snapshot_devices: one
/// device_traces list per device, the segments of all), as PyTorch dumps a multi-GPU process.
void dump_snapshot_devices(const std::string& path, const std::vector<Device>& devices);

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

#ifdef GPUMEMPROF_COMPILED_LIB
// The default allocators' type: compiled in the library (lib/snapshot_files.cpp).
extern template void dump_snapshot<AnyBackend>(const CachingAllocator<AnyBackend>&, const std::string&);
#endif

GPUMEMPROF_NAMESPACE_END

// The bodies of the non-template functions: in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/snapshot_files.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/export/formats/dump_snapshot-inl.hpp"
#endif
