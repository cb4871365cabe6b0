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
#include "gpumemprof/device/owner_memory.hpp"

#if defined(__linux__)
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdio>
#include <cstdlib>
#endif

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
inline std::vector<std::uintptr_t> bounded_stack(void* const* frames, int from, int n) {
  std::vector<std::uintptr_t> out;
  for (int i = from; i < n && out.size() < max_external_stack_frames; ++i) {
    out.push_back(reinterpret_cast<std::uintptr_t>(frames[i]));
  }
  return out;
}

/// The calling thread's return addresses, innermost first, `skip` frames above the caller; empty
/// unless stacks are on.
GPUMEMPROF_NOINLINE inline std::vector<std::uintptr_t> capture_external_stack(std::size_t skip = 0) {
#if defined(__linux__)
  if (!external_stacks.load(std::memory_order_relaxed)) return {};
  void* frames[max_external_stack_frames + 8];
  const int n = ::backtrace(frames, static_cast<int>(std::size(frames)));
  return bounded_stack(frames, static_cast<int>(skip) + 1, n);
#else
  (void)skip;
  return {};
#endif
}

#if defined(__linux__)
/// The demangled name of the exported function holding a code address dladdr described; "" when
/// its symbol is not exported.
inline std::string function_name(const Dl_info& info) {
  if (info.dli_sname == nullptr) return {};
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

/// "+0x1a2b": where `pc` lies in the object dladdr described.
inline std::string object_offset(const Dl_info& info, const char* pc) {
  char off[32];
  std::snprintf(off, sizeof off, "+0x%zx", static_cast<std::size_t>(pc - static_cast<const char*>(info.dli_fbase)));
  return off;
}
#endif

/// Without the history layer: "function" (or "binary+0xoffset") per frame, by dladdr.
inline std::vector<std::string> symbolize_external_stack_plain(const std::uintptr_t* frames, std::size_t count) {
  std::vector<std::string> out;
#if defined(__linux__)
  for (std::size_t i = 0; i < count; ++i) {
    Dl_info info{};
    const auto* pc = reinterpret_cast<const char*>(frames[i]) - 1;  // the call, not the return
    if (::dladdr(pc, &info) == 0 || info.dli_fname == nullptr) {
      out.emplace_back("??");
      continue;
    }
    std::string name = function_name(info);
    if (name.empty()) {
      const std::string_view file = info.dli_fname;
      name = std::string(file.substr(file.rfind('/') + 1)) + object_offset(info, pc);
    }
    if (name.starts_with("gpumemprof::") && out.empty()) continue;  // our own frames above the call site
    out.push_back(std::move(name));
  }
#else
  (void)frames;
  (void)count;
#endif
  return out;
}

inline std::vector<std::string> symbolize_external_stack(const std::vector<std::uintptr_t>& frames) {
  if (frames.empty()) return {};
  const ExternalStackSymbolizer f = external_stack_symbolizer.load(std::memory_order_acquire);
  return f != nullptr ? f(frames.data(), frames.size()) : symbolize_external_stack_plain(frames.data(), frames.size());
}

}  // namespace detail

/// The ledger of one device. Thread-safe; every call takes one short lock.
class ExternalLedger {
 public:
  /// An allocation of `bytes` by `owner` from `site`, known by `id` (its address or handle), made
  /// from the C++ stack `stack` (raw return addresses, innermost first; empty when not recorded).
  /// A second record under a live id replaces the first.
  void record_alloc(std::uint64_t id, std::size_t bytes, std::string_view owner, std::string_view site = {},
                    std::vector<std::uintptr_t> stack = {}) {
    std::lock_guard lock(mutex_);
    add(live_, owners_, id, Live{bytes, std::string(owner), Site{std::string(site), std::move(stack)}});
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
    add(modules_, code_, module, Live{bytes, std::string(owner), Site{}});
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

  /// What the ledger knows now. The top sites' stacks are symbolised (outside the lock) unless
  /// `with_stacks` is false -- the capture's own reads inside CUDA calls, which need only totals.
  [[nodiscard]] ExternalMemory view(bool with_stacks = true) const {
    ExternalMemory m;
    std::vector<std::vector<std::uintptr_t>> stacks, code_stacks;  // code has no stacks
    {
      std::lock_guard lock(mutex_);
      m.context = context_;
      m.tracking = tracking_;
      m.by_owner = summarize(owners_, m.allocations, stacks);
      m.code_by_owner = summarize(code_, m.code, code_stacks);
    }
    for (std::size_t i = 0; with_stacks && i < m.by_owner.size(); ++i) {
      m.by_owner[i].top_stack = detail::symbolize_external_stack(stacks[i]);
      if (m.by_owner[i].top_site.empty() && !m.by_owner[i].top_stack.empty()) {
        m.by_owner[i].top_site = m.by_owner[i].top_stack.front();
      }
    }
    return m;
  }

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
                                            std::vector<std::vector<std::uintptr_t>>& stacks) {
    std::vector<std::pair<OwnerMemory, const Site*>> out;
    for (const auto& [name, o] : owners) {
      auto& [m, top] = out.emplace_back(OwnerMemory{name, o.bytes, o.count, {}, {}}, nullptr);
      std::size_t best = 0;
      for (const auto& [site, bytes] : o.sites) {
        if (bytes > best) {  // ties: the first site in name order
          best = bytes;
          top = &site;
        }
      }
      if (top != nullptr) m.top_site = top->name;
      total += o.bytes;
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first.bytes > b.first.bytes; });
    std::vector<OwnerMemory> result;
    stacks.clear();
    for (auto& [m, top] : out) {
      result.push_back(std::move(m));
      stacks.push_back(top != nullptr ? top->stack : std::vector<std::uintptr_t>{});
    }
    return result;
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
