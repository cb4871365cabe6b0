// Layer 5: the bodies of dump_snapshot.hpp's functions for the default allocators. Included by
// dump_snapshot.hpp in header-only mode; compiled once in the library (lib/snapshot_files.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/export/formats/dump_snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC void dump_snapshot(const std::string& path, const Device& device) {
  dump_snapshot(default_allocator(device), path);
}

GPUMEMPROF_FUNC void dump_snapshot_devices(const std::string& path, const std::vector<Device>& devices) {
  write_snapshot_file(snapshot_devices(devices), path);
}

GPUMEMPROF_NAMESPACE_END
