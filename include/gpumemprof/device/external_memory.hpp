// Layer 1: device memory that no gpumemprof allocator holds -- the ledger of one device.
//
// A library's own cudaMalloc (NCCL's buffers, cuBLAS's workspace), module code loaded by the
// driver and the CUDA context all take device memory that an allocator's statistics cannot see.
// The ledger keeps what is known of it, by owner (the library that asked: "libnccl.so", the
// program itself): live external allocations (bytes, count, and the call site holding the most
// bytes), code loaded per owner, and the context. Who feeds it: the simulated device (its
// external_malloc stands for a library's cudaMalloc) and, on CUDA devices, the CUPTI capture
// (device/cupti.hpp). Frees of allocations the ledger never saw (made before tracking started)
// are ignored, so no figure goes negative.
// With stacks on (track_external_memory({.stacks = true})), each allocation also keeps the raw
// return addresses of its C++ stack; call sites are then told apart by stack, and the owner's top
// site comes with its stack, symbolised when the ledger is read -- by the history layer's
// symbolizer (function, file, line) when the program includes it, else by dladdr (function).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/owner_memory.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// Whether external allocations record their C++ stacks (track_external_memory({.stacks = true})).
inline constinit std::atomic<bool> external_stacks{false};

/// Turns raw return addresses (innermost first) into frames, "function at file:line", leaving out
/// gpumemprof's own. Set by the history layer (history/stacks.hpp), which owns symbolization;
/// null when the program does not include it.
using ExternalStackSymbolizer = std::vector<std::string> (*)(const std::uintptr_t* frames, std::size_t count);
inline constinit std::atomic<ExternalStackSymbolizer> external_stack_symbolizer{nullptr};

inline constexpr std::size_t max_external_stack_frames = 32;

/// frames[from, n) as the stack an external allocation keeps: at most max_external_stack_frames.
std::vector<std::uintptr_t> bounded_stack(void* const* frames, int from, int n);

/// The calling thread's return addresses, innermost first, `skip` frames above the caller; empty
/// unless stacks are on.
std::vector<std::uintptr_t> capture_external_stack(std::size_t skip = 0);  // not inlined: skip counts frames

/// Without the history layer: "function" (or "binary+0xoffset") per frame, by dladdr.
std::vector<std::string> symbolize_external_stack_plain(const std::uintptr_t* frames, std::size_t count);

/// Cuts a symbolised stack (innermost first) after `main`: the C library's start-up frames below
/// it (__libc_start_main, _start, "libc.so.6+0x...") say nothing about the program.
void drop_startup_frames(std::vector<std::string>& frames);

/// The frames of a recorded stack: by the history layer's symbolizer when set, else by dladdr;
/// nothing below main.
std::vector<std::string> symbolize_external_stack(const std::vector<std::uintptr_t>& frames);

}  // namespace detail

/// The ledger of one device. Thread-safe; every call takes one short lock.
class ExternalLedger {
 public:
  /// An allocation of `bytes` by `owner` from `site`, known by `id` (its address or handle), made
  /// from the C++ stack `stack` (raw return addresses, innermost first; empty when not recorded).
  /// A second record under a live id replaces the first.
  void record_alloc(std::uint64_t id, std::size_t bytes, std::string_view owner, std::string_view site = {},
                    std::vector<std::uintptr_t> stack = {});

  /// The free of allocation `id`; false (nothing changes) when the ledger never saw it.
  bool record_free(std::uint64_t id);

  /// Live bytes of allocation `id`; 0 when unknown.
  [[nodiscard]] std::size_t bytes_of(std::uint64_t id) const;

  /// The id under which memory pool number or handle `pool` is kept, apart from allocations.
  [[nodiscard]] static constexpr std::uint64_t pool_id(std::uint64_t pool) noexcept {
    return pool | (std::uint64_t{1} << 62);
  }
  /// Memory pool `id` (pool_id) of `owner` now reserves `reserved` bytes (read from the pool: it
  /// grows and trims without a call that says so); 0 takes its line out.
  void record_pool(std::uint64_t id, std::size_t reserved, std::string_view owner, std::string_view site = {},
                   const std::vector<std::uintptr_t>& stack = {});
  /// Memory pool `id` was destroyed: whatever it reserved is gone (a destroyed pool cannot be
  /// asked any more, so its last figure must not stay behind).
  void forget_pool(std::uint64_t id) { (void)record_free(id); }

  /// `bytes` of device memory taken by module `module` of `owner` (loading it); a second record of
  /// the same module replaces the first.
  void record_code(std::uint64_t module, std::size_t bytes, std::string_view owner);
  /// Module `module` unloaded; false when the ledger never saw it load.
  bool record_code_unload(std::uint64_t module);

  void set_context(std::size_t bytes);
  void set_tracking(bool on);

  /// Forgets every record (tests; tracking restarted on a fresh device).
  void clear();

  /// What the ledger knows now. The top sites' stacks are symbolised (outside the lock) unless
  /// `with_stacks` is false -- the capture's own reads inside CUDA calls, which need only totals.
  [[nodiscard]] ExternalMemory view(bool with_stacks = true) const;

 private:
  /// A call site: the function the owner called from (may be "") and, when recorded, its stack.
  struct Site {
    std::string name;
    std::vector<std::uintptr_t> stack;
    auto operator<=>(const Site&) const = default;
  };
  struct Live {
    std::size_t bytes = 0;
    std::string owner;
    Site site;
  };
  struct Owner {
    std::size_t bytes = 0;
    std::size_t count = 0;
    std::map<Site, std::size_t> sites;  // site -> live bytes
  };

  /// The owners, most bytes first; `stacks` gains the raw top-site stack of each, in the same order.
  static std::vector<OwnerMemory> summarize(const std::map<std::string, Owner>& owners, std::size_t& total,
                                            std::vector<std::vector<std::uintptr_t>>& stacks);

  static void take(std::map<std::string, Owner>& owners, const Live& l);
  static void add(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners, std::uint64_t id, Live l);
  static bool erase(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners, std::uint64_t id);
  bool erase_locked(std::uint64_t id);
  bool erase_code_locked(std::uint64_t module);

  mutable std::mutex mutex_;
  std::map<std::uint64_t, Live> live_;     // id -> allocation
  std::map<std::string, Owner> owners_;    // owner -> live allocations
  std::map<std::uint64_t, Live> modules_;  // module -> code bytes
  std::map<std::string, Owner> code_;      // owner -> loaded code
  std::size_t context_ = 0;
  bool tracking_ = false;
};

namespace detail {

inline constexpr int max_ledger_devices = 64;

/// The ledger of CUDA device `index` (fed by the CUPTI capture); never destroyed, since late
/// frees at exit may still reach it.
[[nodiscard]] ExternalLedger& cuda_ledger(int index);

/// Device memory gpumemprof's CUDA backends hold on CUDA device `index` (segments and physical
/// pages), kept by the backends themselves: the capture reads it inside CUDA calls, where asking an
/// allocator (and its locks) could deadlock.
[[nodiscard]] std::atomic<std::size_t>& cuda_own_bytes(int index);

/// Set by the capture: brings figures read from the device at read time (memory pools'
/// reserved bytes) into the ledger of CUDA device `index` before it is read.
inline std::atomic<void (*)(int index)> cuda_ledger_refresh{nullptr};

/// Depth of gpumemprof's own device calls on this thread: the capture skips calls made while it
/// is above zero, so the allocator's segments are not counted twice.
inline thread_local int own_device_call_depth = 0;

}  // namespace detail

/// Marks the device calls of its scope as gpumemprof's own (CudaBackend wraps its cudaMalloc,
/// cudaFree and page mapping in one).
class OwnDeviceCalls {
 public:
  OwnDeviceCalls() noexcept { ++detail::own_device_call_depth; }
  ~OwnDeviceCalls() { --detail::own_device_call_depth; }
  OwnDeviceCalls(const OwnDeviceCalls&) = delete;
  OwnDeviceCalls& operator=(const OwnDeviceCalls&) = delete;
};

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/device.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/device/external_memory-inl.hpp"
#endif
