// Layer 4: scope hooks -- code told about every profiled scope of every profiler in the
// process: integrations/nvtx.hpp opens an NVTX range per scope this way, so the profiler itself
// never includes NVTX or CUDA headers.
//
// A hook is a pair of plain function pointers with a user pointer. The registry is a fixed
// array of atomic pointers: a scope with no hook registered pays one relaxed load; with hooks,
// one acquire load per slot. Hooks run on the scope's thread: enter() before the profiler's
// entry reading, exit() after the result is complete, in reverse order of entry.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "gpumemprof/config.hpp"
#include "gpumemprof/profiler/profile_result.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Callbacks around every profiled scope. Neither may throw (they run in destructors).
struct ScopeHook {
  /// At scope entry; `name` is the scope's name (NUL-terminated). Returns a token for exit.
  std::uint64_t (*enter)(void* user, const char* name) noexcept = nullptr;
  /// At scope exit with enter's token and the scope's finished result.
  void (*exit)(void* user, std::uint64_t token, const ProfileResult& result) noexcept = nullptr;
  void* user = nullptr;
};

namespace detail {

inline constexpr std::size_t max_scope_hooks = 8;

struct ScopeHookRegistry {
  std::array<std::atomic<const ScopeHook*>, max_scope_hooks> slots{};
  std::atomic<std::size_t> count{0};
  std::mutex mutex;  // serializes registration
};

inline constinit ScopeHookRegistry scope_hook_registry{};

/// The hooks one scope entered, with their tokens, so exit reaches exactly those.
class EnteredHooks {
 public:
  void enter(const char* name) noexcept {
    auto& reg = scope_hook_registry;
    if (GPUMEMPROF_LIKELY(reg.count.load(std::memory_order_relaxed) == 0)) return;
    for (auto& slot : reg.slots) {
      const ScopeHook* h = slot.load(std::memory_order_acquire);
      if (h == nullptr) continue;
      hooks_[count_] = h;
      tokens_[count_] = h->enter != nullptr ? h->enter(h->user, name) : 0;
      ++count_;
    }
  }
  /// Exits every entered hook, newest first; a second call does nothing.
  void exit(const ProfileResult& result) noexcept {
    while (count_ > 0) {
      --count_;
      const ScopeHook* h = hooks_[count_];
      if (h->exit != nullptr) h->exit(h->user, tokens_[count_], result);
    }
  }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }

 private:
  std::array<const ScopeHook*, max_scope_hooks> hooks_{};
  std::array<std::uint64_t, max_scope_hooks> tokens_{};
  std::size_t count_ = 0;
};

}  // namespace detail

/// Registers `hook` for every profiled scope in the process from now on; returns its slot for
/// unregister_scope_hook. `*hook` must stay valid while registered and until scopes that
/// entered it have exited. Throws std::length_error when 8 hooks are registered.
inline std::size_t register_scope_hook(const ScopeHook* hook) {
  if (hook == nullptr) throw std::invalid_argument("register_scope_hook: null hook");
  auto& reg = detail::scope_hook_registry;
  std::lock_guard lock(reg.mutex);
  for (std::size_t i = 0; i < reg.slots.size(); ++i) {
    if (reg.slots[i].load(std::memory_order_relaxed) == nullptr) {
      reg.slots[i].store(hook, std::memory_order_release);
      reg.count.fetch_add(1, std::memory_order_release);
      return i;
    }
  }
  throw std::length_error("register_scope_hook: all " + std::to_string(detail::max_scope_hooks) +
                          " hook slots are taken");
}

/// Removes the hook in `slot` (from register_scope_hook). Scopes already open still call its
/// exit. Unknown or empty slots are ignored.
inline void unregister_scope_hook(std::size_t slot) {
  auto& reg = detail::scope_hook_registry;
  std::lock_guard lock(reg.mutex);
  if (slot >= reg.slots.size() || reg.slots[slot].load(std::memory_order_relaxed) == nullptr) return;
  reg.slots[slot].store(nullptr, std::memory_order_release);
  reg.count.fetch_sub(1, std::memory_order_release);
}

/// Number of hooks registered now.
[[nodiscard]] inline std::size_t scope_hook_count() noexcept {
  return detail::scope_hook_registry.count.load(std::memory_order_acquire);
}

GPUMEMPROF_NAMESPACE_END
