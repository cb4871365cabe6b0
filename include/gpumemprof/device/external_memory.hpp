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
#pragma once

#include <algorithm>
#include <array>
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

GPUMEMPROF_NAMESPACE_BEGIN

/// Device memory of one owner outside the allocator. Byte values in bytes.
struct OwnerMemory {
  std::string owner;     ///< "libnccl.so", "libcublas.so", the program's file name
  std::size_t bytes = 0;  ///< live bytes
  std::size_t count = 0;  ///< live allocations (loaded modules, for code)
  std::string top_site;  ///< the call site holding the most of `bytes` ("" when unknown)
  friend bool operator==(const OwnerMemory&, const OwnerMemory&) = default;
};

/// What a device's ledger knows at one instant. Byte values in bytes.
struct ExternalMemory {
  std::size_t allocations = 0;          ///< live external allocations, all owners
  std::vector<OwnerMemory> by_owner;    ///< most bytes first
  std::size_t code = 0;                 ///< module code and data loaded by the driver
  std::vector<OwnerMemory> code_by_owner;  ///< most bytes first
  std::size_t context = 0;              ///< the CUDA context (the simulated device's configured size)
  bool tracking = false;                ///< whether external allocations are captured on this device
};

/// The ledger of one device. Thread-safe; every call takes one short lock.
class ExternalLedger {
 public:
  /// An allocation of `bytes` by `owner` from `site`, known by `id` (its address or handle).
  /// A second record under a live id replaces the first.
  void record_alloc(std::uint64_t id, std::size_t bytes, std::string_view owner, std::string_view site = {}) {
    std::lock_guard lock(mutex_);
    add(live_, owners_, id, Live{bytes, std::string(owner), std::string(site)});
  }

  /// The free of allocation `id`; false (nothing changes) when the ledger never saw it.
  bool record_free(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return erase_locked(id);
  }

  /// Live bytes of allocation `id`; 0 when unknown.
  [[nodiscard]] std::size_t bytes_of(std::uint64_t id) const {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    return it == live_.end() ? 0 : it->second.bytes;
  }

  /// `bytes` of device memory taken by module `module` of `owner` (loading it); a second record of
  /// the same module replaces the first.
  void record_code(std::uint64_t module, std::size_t bytes, std::string_view owner) {
    std::lock_guard lock(mutex_);
    add(modules_, code_, module, Live{bytes, std::string(owner), {}});
  }
  /// Module `module` unloaded; false when the ledger never saw it load.
  bool record_code_unload(std::uint64_t module) {
    std::lock_guard lock(mutex_);
    return erase_code_locked(module);
  }

  void set_context(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    context_ = bytes;
  }
  void set_tracking(bool on) {
    std::lock_guard lock(mutex_);
    tracking_ = on;
  }

  /// Forgets every record (tests; tracking restarted on a fresh device).
  void clear() {
    std::lock_guard lock(mutex_);
    live_.clear();
    owners_.clear();
    modules_.clear();
    code_.clear();
    context_ = 0;
  }

  [[nodiscard]] ExternalMemory view() const {
    std::lock_guard lock(mutex_);
    ExternalMemory m;
    m.context = context_;
    m.tracking = tracking_;
    m.by_owner = summarize(owners_, m.allocations);
    m.code_by_owner = summarize(code_, m.code);
    return m;
  }

 private:
  struct Live {
    std::size_t bytes = 0;
    std::string owner;
    std::string site;
  };
  struct Owner {
    std::size_t bytes = 0;
    std::size_t count = 0;
    std::map<std::string, std::size_t> sites;  // site -> live bytes
  };

  static std::vector<OwnerMemory> summarize(const std::map<std::string, Owner>& owners, std::size_t& total) {
    std::vector<OwnerMemory> out;
    for (const auto& [name, o] : owners) {
      OwnerMemory& m = out.emplace_back(OwnerMemory{name, o.bytes, o.count, {}});
      std::size_t best = 0;
      for (const auto& [site, bytes] : o.sites) {
        if (bytes > best) {  // ties: the first site in name order
          best = bytes;
          m.top_site = site;
        }
      }
      total += o.bytes;
    }
    std::stable_sort(out.begin(), out.end(), [](const OwnerMemory& a, const OwnerMemory& b) { return a.bytes > b.bytes; });
    return out;
  }

  static void take(std::map<std::string, Owner>& owners, const Live& l) {
    auto it = owners.find(l.owner);
    Owner& o = it->second;
    o.bytes -= l.bytes;
    --o.count;
    if (auto s = o.sites.find(l.site); s != o.sites.end() && (s->second -= l.bytes) == 0) o.sites.erase(s);
    if (o.count == 0) owners.erase(it);
  }
  static void add(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners, std::uint64_t id, Live l) {
    erase(live, owners, id);
    Owner& o = owners[l.owner];
    o.bytes += l.bytes;
    ++o.count;
    o.sites[l.site] += l.bytes;
    live.emplace(id, std::move(l));
  }
  static bool erase(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners, std::uint64_t id) {
    auto it = live.find(id);
    if (it == live.end()) return false;
    take(owners, it->second);
    live.erase(it);
    return true;
  }
  bool erase_locked(std::uint64_t id) { return erase(live_, owners_, id); }
  bool erase_code_locked(std::uint64_t module) { return erase(modules_, code_, module); }

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
[[nodiscard]] inline ExternalLedger& cuda_ledger(int index) {
  static auto* ledgers = new std::array<ExternalLedger, max_ledger_devices>();
  return (*ledgers)[static_cast<std::size_t>(std::clamp(index, 0, max_ledger_devices - 1))];
}

/// Device memory gpumemprof's CUDA backends hold on CUDA device `index` (segments and physical
/// pages), kept by the backends themselves: the capture reads it inside CUDA calls, where asking an
/// allocator (and its locks) could deadlock.
[[nodiscard]] inline std::atomic<std::size_t>& cuda_own_bytes(int index) {
  static auto* own = new std::array<std::atomic<std::size_t>, max_ledger_devices>();
  return (*own)[static_cast<std::size_t>(std::clamp(index, 0, max_ledger_devices - 1))];
}

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
