// Layer 1: the bodies of the simulated device's memory outside the allocator
// (simulated.hpp): a library's own cudaMalloc (external_malloc) and the program's own memory
// pools (external_pool_*), both charged against the device's capacity and listed in its
// external-memory ledger. `inline` in header-only mode, defined once in the compiled library
// (lib/device.cpp) otherwise. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/device/simulated.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC void* SimulatedBackend::external_malloc(std::size_t bytes, std::string_view owner,
                                                                            std::string_view site) {
  std::vector<std::uintptr_t> stack = detail::capture_external_stack();
  std::lock_guard lock(s_->mutex);
  const std::size_t charged = round_up(std::max<std::size_t>(bytes, 1), s_->opt.granularity);
  const std::uintptr_t addr =
      charged > s_->opt.capacity - std::min(s_->opt.capacity, used_locked()) ? 0 : s_->va.take_lowest(charged);
  if (addr == 0) return nullptr;
  s_->external_live.emplace(addr, charged);
  s_->external_charged += charged;
  s_->ledger.record_alloc(addr, bytes, owner, site, std::move(stack));
  return reinterpret_cast<void*>(addr);
}

GPUMEMPROF_FUNC void SimulatedBackend::external_free(void* ptr) {
  std::lock_guard lock(s_->mutex);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = s_->external_live.find(addr);
  if (it == s_->external_live.end()) {
    throw DeviceRuntimeError(name() + ": external free of " + hex(addr) + ", which external_malloc did not return");
  }
  s_->external_charged -= it->second;
  s_->va.give(addr, it->second);
  s_->external_live.erase(it);
  s_->ledger.record_free(addr);
}

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC std::uint64_t SimulatedBackend::external_pool_create(std::string_view owner,
                                                                                         std::string_view site) {
  std::vector<std::uintptr_t> stack = detail::capture_external_stack();
  std::lock_guard lock(s_->mutex);
  const std::uint64_t id = ExternalLedger::pool_id(++s_->pools_created);
  SimPool& p = s_->pools[id];
  p.owner = owner;
  p.site = site;
  p.stack = std::move(stack);
  return id;
}

GPUMEMPROF_FUNC void* SimulatedBackend::external_pool_malloc(std::uint64_t pool, std::size_t bytes) {
  std::lock_guard lock(s_->mutex);
  SimPool& p = pool_locked(pool, "allocate from");
  const std::size_t need = round_up(p.live + std::max<std::size_t>(bytes, 1), pool_granule);
  if (need > p.reserved) {
    const std::size_t grow = need - p.reserved;
    if (grow > s_->opt.capacity - std::min(s_->opt.capacity, used_locked())) return nullptr;
    set_pool_reserved_locked(pool, p, need);
  }
  // Never dereferenced: a name for the block, in a range of its own per pool.
  const std::uintptr_t addr = ((pool & 0xffffU) << 40) + p.next_offset;
  p.next_offset += round_up(std::max<std::size_t>(bytes, 1), 512);
  p.allocations[addr] = bytes;
  p.live += bytes;
  return reinterpret_cast<void*>(addr);
}

GPUMEMPROF_FUNC void SimulatedBackend::external_pool_free(std::uint64_t pool, void* ptr) {
  std::lock_guard lock(s_->mutex);
  SimPool& p = pool_locked(pool, "free into");
  auto it = p.allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == p.allocations.end()) throw DeviceRuntimeError(name() + ": pool free of a pointer the pool did not return");
  p.live -= it->second;
  p.allocations.erase(it);
}

GPUMEMPROF_FUNC void SimulatedBackend::external_pool_trim(std::uint64_t pool, std::size_t keep) {
  std::lock_guard lock(s_->mutex);
  SimPool& p = pool_locked(pool, "trim");
  const std::size_t floor =
      std::max(round_up(p.live, pool_granule), round_up(std::min(keep, p.reserved), pool_granule));
  if (floor < p.reserved) set_pool_reserved_locked(pool, p, floor);
}

GPUMEMPROF_FUNC void SimulatedBackend::external_pool_destroy(std::uint64_t pool) {
  std::lock_guard lock(s_->mutex);
  SimPool& p = pool_locked(pool, "destroy");
  set_pool_reserved_locked(pool, p, 0);
  s_->ledger.forget_pool(pool);
  s_->pools.erase(pool);
}

GPUMEMPROF_FUNC ExternalMemory SimulatedBackend::external_memory() const {
  ExternalMemory m = s_->ledger.view();
  m.context = s_->opt.context_bytes;
  m.tracking = true;  // every external_malloc is seen
  return m;
}

GPUMEMPROF_FUNC SimulatedBackend::SimPool& SimulatedBackend::pool_locked(std::uint64_t pool, const char* what) {
  auto it = s_->pools.find(pool);
  if (it == s_->pools.end())
    throw DeviceRuntimeError(name() + ": cannot " + what + " pool " + hex(pool) + ": no such pool");
  return it->second;
}

GPUMEMPROF_FUNC void SimulatedBackend::set_pool_reserved_locked(std::uint64_t id, SimPool& p, std::size_t reserved) {
  s_->external_charged = s_->external_charged - p.reserved + reserved;
  p.reserved = reserved;
  s_->ledger.record_pool(id, reserved, p.owner, p.site, p.stack);
}

GPUMEMPROF_NAMESPACE_END
