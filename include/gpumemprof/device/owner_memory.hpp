// Layer 1: what is known of device memory outside the allocator at one instant (ExternalMemory,
// by owner), as a device's ledger reports it (device/external_memory.hpp keeps the ledger). A
// value type apart from the ledger: backends return it without their users parsing the ledger.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Device memory of one owner outside the allocator. Byte values in bytes.
struct OwnerMemory {
  std::string owner;      ///< "libnccl.so", "libcublas.so", the program's file name
  std::size_t bytes = 0;  ///< live bytes
  std::size_t count = 0;  ///< live allocations (loaded modules, for code)
  std::string top_site;   ///< the call site holding the most of `bytes` ("" when unknown)
  /// The C++ stack of top_site, innermost first ("function at file:line"); empty unless stacks
  /// were recorded (track_external_memory({.stacks = true})).
  std::vector<std::string> top_stack;
  friend bool operator==(const OwnerMemory&, const OwnerMemory&) = default;
};

/// What a device's ledger knows at one instant. Byte values in bytes.
struct ExternalMemory {
  std::size_t allocations = 0;             ///< live external allocations, all owners
  std::vector<OwnerMemory> by_owner;       ///< most bytes first
  std::size_t code = 0;                    ///< module code and data loaded by the driver
  std::vector<OwnerMemory> code_by_owner;  ///< most bytes first
  std::size_t context = 0;                 ///< the CUDA context (the simulated device's configured size)
  bool tracking = false;                   ///< whether external allocations are captured on this device
};

GPUMEMPROF_NAMESPACE_END
