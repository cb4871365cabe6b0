// Layer 1: the bodies of the external-memory ledger and of the stacks its allocations keep.
// Included by external_memory.hpp in header-only mode; compiled once in the library
// (lib/device.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
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
#include "gpumemprof/device/dl_symbols.hpp"
#include "gpumemprof/device/external_memory.hpp"

#if defined(__linux__)
#include <dlfcn.h>
#include <execinfo.h>
#endif

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

GPUMEMPROF_FUNC std::vector<std::uintptr_t> bounded_stack(void* const* frames, int from, int n) {
  std::vector<std::uintptr_t> out;
  for (int i = from; i < n && out.size() < max_external_stack_frames; ++i) {
    out.push_back(reinterpret_cast<std::uintptr_t>(frames[i]));
  }
  return out;
}

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC std::vector<std::uintptr_t> capture_external_stack(std::size_t skip) {
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

GPUMEMPROF_FUNC std::vector<std::string> symbolize_external_stack_plain(const std::uintptr_t* frames,
                                                                        std::size_t count) {
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

GPUMEMPROF_FUNC void drop_startup_frames(std::vector<std::string>& frames) {
  const auto named = [](const std::string& f, std::string_view fn) {
    return f.size() >= fn.size() && f.compare(0, fn.size(), fn) == 0 &&
           (f.size() == fn.size() || f[fn.size()] == ' ' || f[fn.size()] == '(');
  };
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (named(frames[i], "main")) {
      frames.resize(i + 1);
      return;
    }
    if (named(frames[i], "__libc_start_main") || named(frames[i], "__libc_start_call_main") ||
        named(frames[i], "_start")) {
      // main itself was not named (no -rdynamic): libc's frame that called it goes too.
      while (i > 0 && frames[i - 1].starts_with("libc.so")) --i;
      frames.resize(i);
      return;
    }
  }
}

GPUMEMPROF_FUNC std::vector<std::string> symbolize_external_stack(const std::vector<std::uintptr_t>& frames) {
  if (frames.empty()) return {};
  const ExternalStackSymbolizer f = external_stack_symbolizer.load(std::memory_order_acquire);
  std::vector<std::string> out =
      f != nullptr ? f(frames.data(), frames.size()) : symbolize_external_stack_plain(frames.data(), frames.size());
  drop_startup_frames(out);
  return out;
}

}  // namespace detail

GPUMEMPROF_FUNC void ExternalLedger::record_alloc(std::uint64_t id, std::size_t bytes, std::string_view owner,
                                                  std::string_view site, std::vector<std::uintptr_t> stack) {
  std::lock_guard lock(mutex_);
  add(live_, owners_, id, Live{bytes, std::string(owner), Site{std::string(site), std::move(stack)}});
}

GPUMEMPROF_FUNC bool ExternalLedger::record_free(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  return erase_locked(id);
}

GPUMEMPROF_FUNC std::size_t ExternalLedger::bytes_of(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(id);
  return it == live_.end() ? 0 : it->second.bytes;
}

GPUMEMPROF_FUNC void ExternalLedger::record_pool(std::uint64_t id, std::size_t reserved, std::string_view owner,
                                                 std::string_view site, const std::vector<std::uintptr_t>& stack) {
  std::lock_guard lock(mutex_);
  if (reserved == 0) {
    (void)erase_locked(id);
    return;
  }
  if (auto it = live_.find(id); it != live_.end() && it->second.bytes == reserved) return;
  add(live_, owners_, id, Live{reserved, std::string(owner), Site{std::string(site), stack}});
}

GPUMEMPROF_FUNC void ExternalLedger::record_code(std::uint64_t module, std::size_t bytes, std::string_view owner) {
  std::lock_guard lock(mutex_);
  add(modules_, code_, module, Live{bytes, std::string(owner), Site{}});
}

GPUMEMPROF_FUNC bool ExternalLedger::record_code_unload(std::uint64_t module) {
  std::lock_guard lock(mutex_);
  return erase_code_locked(module);
}

GPUMEMPROF_FUNC void ExternalLedger::set_context(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  context_ = bytes;
}

GPUMEMPROF_FUNC void ExternalLedger::set_tracking(bool on) {
  std::lock_guard lock(mutex_);
  tracking_ = on;
}

GPUMEMPROF_FUNC void ExternalLedger::clear() {
  std::lock_guard lock(mutex_);
  live_.clear();
  owners_.clear();
  modules_.clear();
  code_.clear();
  context_ = 0;
}

GPUMEMPROF_FUNC ExternalMemory ExternalLedger::view(bool with_stacks) const {
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

GPUMEMPROF_FUNC std::vector<OwnerMemory> ExternalLedger::summarize(const std::map<std::string, Owner>& owners,
                                                                   std::size_t& total,
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

GPUMEMPROF_FUNC void ExternalLedger::take(std::map<std::string, Owner>& owners, const Live& l) {
  auto it = owners.find(l.owner);
  Owner& o = it->second;
  o.bytes -= l.bytes;
  --o.count;
  if (auto s = o.sites.find(l.site); s != o.sites.end() && (s->second -= l.bytes) == 0) o.sites.erase(s);
  if (o.count == 0) owners.erase(it);
}

GPUMEMPROF_FUNC void ExternalLedger::add(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners,
                                         std::uint64_t id, Live l) {
  erase(live, owners, id);
  Owner& o = owners[l.owner];
  o.bytes += l.bytes;
  ++o.count;
  o.sites[l.site] += l.bytes;
  live.emplace(id, std::move(l));
}

GPUMEMPROF_FUNC bool ExternalLedger::erase(std::map<std::uint64_t, Live>& live, std::map<std::string, Owner>& owners,
                                           std::uint64_t id) {
  auto it = live.find(id);
  if (it == live.end()) return false;
  take(owners, it->second);
  live.erase(it);
  return true;
}

GPUMEMPROF_FUNC bool ExternalLedger::erase_locked(std::uint64_t id) { return erase(live_, owners_, id); }

GPUMEMPROF_FUNC bool ExternalLedger::erase_code_locked(std::uint64_t module) { return erase(modules_, code_, module); }

namespace detail {

GPUMEMPROF_FUNC ExternalLedger& cuda_ledger(int index) {
  static auto* ledgers = new std::array<ExternalLedger, max_ledger_devices>();
  return (*ledgers)[static_cast<std::size_t>(std::clamp(index, 0, max_ledger_devices - 1))];
}

GPUMEMPROF_FUNC std::atomic<std::size_t>& cuda_own_bytes(int index) {
  static auto* own = new std::array<std::atomic<std::size_t>, max_ledger_devices>();
  return (*own)[static_cast<std::size_t>(std::clamp(index, 0, max_ledger_devices - 1))];
}

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
