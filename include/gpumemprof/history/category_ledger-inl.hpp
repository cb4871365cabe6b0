// Layer 3: the bodies of CategoryLedger and of the default allocators' ledgers. Included by
// category_ledger.hpp in header-only mode; compiled once in the library (lib/history.cpp) for
// GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/category_ledger.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC void CategoryLedger::detach() {
  std::lock_guard lock(attach_mutex_);
  if (remove_) remove_();
  remove_ = nullptr;
  flush_ = nullptr;
  allocator_ = nullptr;
}

GPUMEMPROF_FUNC void CategoryLedger::deliver() const {
  std::lock_guard lock(attach_mutex_);
  if (flush_) flush_();
}

GPUMEMPROF_FUNC CategoryStats CategoryLedger::stats() const {
  deliver();  // every event before this call counted
  std::vector<CategoryStat> copy;
  std::vector<bool> used;
  {
    std::lock_guard lock(mutex_);
    copy = by_id_;
    used = used_;
  }
  const std::vector<std::string> names =
      detail::MetadataStrings::instance().lookup_all(static_cast<std::uint32_t>(copy.size()));
  CategoryStats out;
  out[category::unknown] = copy.empty() ? CategoryStat{} : copy[0];
  for (std::size_t id = 1; id < copy.size(); ++id) {
    if (id >= names.size()) break;
    if (id >= used.size() || !used[id]) continue;  // a string no block carried as its category
    CategoryStat& s = out[names[id]];              // two ids never share a name; += keeps "unknown" exact
    s.current += copy[id].current;
    s.peak = std::max(s.peak, copy[id].peak);
    s.allocated_current += copy[id].allocated_current;
    s.allocated_peak = std::max(s.allocated_peak, copy[id].allocated_peak);
  }
  return out;
}

GPUMEMPROF_FUNC void CategoryLedger::reset_peaks() {
  deliver();  // the peaks restart from what is current at this call, frees just made included
  std::lock_guard lock(mutex_);
  for (CategoryStat& s : by_id_) {
    s.peak = s.current;
    s.allocated_peak = s.allocated_current;
  }
}

GPUMEMPROF_FUNC void CategoryLedger::sink_events(void* user, std::span<const AllocatorEvent> events) noexcept {
  auto* self = static_cast<CategoryLedger*>(user);
  std::lock_guard lock(self->mutex_);
  for (const AllocatorEvent& e : events) {
    const auto requested = static_cast<std::int64_t>(e.size);
    const auto block = static_cast<std::int64_t>(e.block_size);
    switch (e.action) {
      case TraceAction::alloc: self->add(e.category, requested, block); break;
      case TraceAction::free_requested: self->add(e.category, 0, -block); break;
      case TraceAction::free_completed: self->add(e.category, -requested, 0); break;
      case TraceAction::category_change:  // a live block (CachingAllocator::set_category): both measures move
        if (self->add(e.previous_category, -requested, -block)) self->add(e.category, requested, block);
        break;
      default: break;
    }
  }
}

GPUMEMPROF_FUNC bool CategoryLedger::add(std::uint32_t id, std::int64_t requested, std::int64_t allocated) noexcept {
  try {
    if (id >= by_id_.size()) {
      by_id_.resize(std::size_t{id} + 1);
      used_.resize(std::size_t{id} + 1, false);
    }
  } catch (...) {
    return false;
  }
  used_[id] = true;
  CategoryStat& s = by_id_[id];
  s.current += requested;
  s.peak = std::max(s.peak, s.current);
  s.allocated_current += allocated;
  s.allocated_peak = std::max(s.allocated_peak, s.allocated_current);
  return true;
}

namespace detail {

GPUMEMPROF_FUNC DefaultCategoryLedgers& DefaultCategoryLedgers::instance() {
  static auto* ledgers = new DefaultCategoryLedgers();
  return *ledgers;
}

GPUMEMPROF_FUNC void DefaultCategoryLedgers::enable_all() {
  std::lock_guard once(enable_mutex_);
  if (enabled_.load(std::memory_order_relaxed)) return;
  default_allocator_created.store(&DefaultCategoryLedgers::on_created, std::memory_order_release);
  for_each_default_allocator([this](DeviceAllocator& a) { ledger_of(a); });
  enabled_.store(true, std::memory_order_release);
}

GPUMEMPROF_FUNC CategoryLedger& DefaultCategoryLedgers::ledger_of(DeviceAllocator& allocator) {
  std::unique_ptr<CategoryLedger>* slot = nullptr;
  {
    std::lock_guard lock(mutex_);
    slot = &ledgers_[&allocator];
    if (*slot == nullptr) *slot = std::make_unique<CategoryLedger>();
  }
  (*slot)->attach(allocator);  // no-op when attached
  return **slot;
}

GPUMEMPROF_FUNC void DefaultCategoryLedgers::on_created(DeviceAllocator& a) { instance().ledger_of(a); }

}  // namespace detail

GPUMEMPROF_FUNC CategoryStats category_stats(const Device& device) {
  auto& ledgers = detail::DefaultCategoryLedgers::instance();
  ledgers.enable();
  return ledgers.ledger_of(default_allocator(device)).stats();
}

GPUMEMPROF_FUNC void reset_category_peaks(const Device& device) {
  auto& ledgers = detail::DefaultCategoryLedgers::instance();
  ledgers.enable();
  ledgers.ledger_of(default_allocator(device)).reset_peaks();
}

GPUMEMPROF_NAMESPACE_END
