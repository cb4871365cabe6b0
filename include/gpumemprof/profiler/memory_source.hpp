// Layer 4: MemorySource -- what the profiler, the sampler, the tracker and the leak detector
// read: one allocator (allocator level), or only the device's own account (device level, for
// programs that allocate with something else).
//
// Type-erased so that one profiler type serves the per-device default allocators and any
// CachingAllocator<Backend> (tests use their own simulated allocators). Every reading here is
// safe from any thread; gauges() takes no allocator-wide lock (with several streams it folds their
// stat journals, holding each stream's lock for a moment), so a sampler never stalls allocation.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/profiler/memory_snapshot.hpp"
#include "gpumemprof/profiler/process_memory.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

#if GPUMEMPROF_WITH_CUDA
class CudaBackend;  // device/cuda.hpp
#endif

/// Allocator level: exact allocator gauges, per-interval peaks, live blocks. Device level:
/// only the device's used memory (cudaMemGetInfo); allocator fields are unavailable.
enum class ProfileLevel : unsigned char { allocator, device };

class MemorySource {
 public:
  virtual ~MemorySource() = default;
  MemorySource(const MemorySource&) = delete;
  MemorySource& operator=(const MemorySource&) = delete;

  [[nodiscard]] bool allocator_level() const noexcept { return level_ == ProfileLevel::allocator; }
  [[nodiscard]] ProfileLevel level() const noexcept { return level_; }
  /// N of "cuda:N" / "sim:N".
  [[nodiscard]] int device_id() const noexcept { return device_id_; }
  /// "cuda:0", "sim:1", "host".
  [[nodiscard]] const std::string& device_name() const noexcept { return device_name_; }
  /// True when synchronize() waits for device work (CUDA devices).
  [[nodiscard]] bool can_synchronize() const noexcept { return can_synchronize_; }

  /// The allocator's gauges, one consistent instant (all zero at device level).
  [[nodiscard]] virtual AllocatorGauges gauges() const noexcept = 0;
  /// Opens an allocator peak window (allocator level only); see CachingAllocator.
  [[nodiscard]] virtual std::uint64_t open_peak_window() = 0;
  /// The peak of allocated bytes since the window opened; closes it.
  virtual std::int64_t close_peak_window(std::uint64_t id) = 0;
  /// The peak of allocated bytes since the window opened; keeps it open.
  [[nodiscard]] virtual std::int64_t peak_window(std::uint64_t id) const = 0;
  /// The allocator's segments with their blocks (empty at device level).
  [[nodiscard]] virtual std::vector<SegmentView> segments() const = 0;
  /// The device's free and total memory.
  [[nodiscard]] virtual MemInfo mem_get_info() const = 0;
  /// Live bytes of allocations outside gpumemprof's allocators on the device (its ledger; 0
  /// where the device has none).
  [[nodiscard]] virtual std::size_t external_memory() const { return 0; }
  /// Waits for the device's queued work; no-op unless can_synchronize().
  virtual void synchronize() const = 0;
  /// The allocation stack behind a block's or segment's context handle, when a HistoryRecorder
  /// with stacks is recording on the allocator; nullptr otherwise.
  [[nodiscard]] virtual Frames frames_of(std::uint64_t context) const = 0;

 protected:
  MemorySource(ProfileLevel level, int device_id, std::string device_name, bool can_synchronize)
      : level_(level), device_id_(device_id), device_name_(std::move(device_name)), can_synchronize_(can_synchronize) {}

 private:
  ProfileLevel level_;
  int device_id_;
  std::string device_name_;
  bool can_synchronize_;
};

namespace detail {

template <class B>
[[nodiscard]] bool is_cuda_backend([[maybe_unused]] B& backend) {
#if GPUMEMPROF_WITH_CUDA
  if constexpr (std::is_same_v<B, CudaBackend>) return true;
  if constexpr (std::is_same_v<B, AnyBackend>) return backend.is_cuda();
#endif
  return false;
}

/// Waits for the work queued on CUDA device `device` (cuda_synchronize), out of line: the
/// profiler's sources need no CUDA header.
void synchronize_cuda_device(int device);

/// The stack behind `context` from the HistoryRecorder attached to `allocator` (an allocator's
/// address; nullptr when none records it), out of line: the sources need no history header.
[[nodiscard]] Frames recorded_frames(const void* allocator, std::uint64_t context);

template <DeviceBackend B>
class AllocatorSource final : public MemorySource {
 public:
  AllocatorSource(CachingAllocator<B>& allocator, ProfileLevel level)
      : MemorySource(level, allocator.device_index(), allocator.device_name(), is_cuda_backend(allocator.backend())),
        allocator_(allocator) {}

  [[nodiscard]] AllocatorGauges gauges() const noexcept override {
    return allocator_level() ? allocator_.gauges() : AllocatorGauges{};
  }
  [[nodiscard]] std::uint64_t open_peak_window() override { return allocator_.open_peak_window(); }
  std::int64_t close_peak_window(std::uint64_t id) override { return allocator_.close_peak_window(id); }
  [[nodiscard]] std::int64_t peak_window(std::uint64_t id) const override { return allocator_.peak_window(id); }
  [[nodiscard]] std::vector<SegmentView> segments() const override {
    return allocator_level() ? allocator_.segments() : std::vector<SegmentView>{};
  }
  [[nodiscard]] MemInfo mem_get_info() const override { return allocator_.mem_get_info(); }
  [[nodiscard]] std::size_t external_memory() const override {
    if constexpr (requires { allocator_.backend().external_memory(); }) {
      return allocator_.backend().external_memory().allocations;
    }
    return 0;
  }
  void synchronize() const override {
#if GPUMEMPROF_WITH_CUDA
    if (can_synchronize()) synchronize_cuda_device(device_id());
#endif
  }
  [[nodiscard]] Frames frames_of(std::uint64_t context) const override {
    return context != 0 ? recorded_frames(&allocator_, context) : nullptr;
  }

 private:
  CachingAllocator<B>& allocator_;
};

}  // namespace detail

/// A source reading `allocator`, which must outlive it.
template <DeviceBackend B>
[[nodiscard]] std::shared_ptr<MemorySource> make_memory_source(CachingAllocator<B>& allocator,
                                                               ProfileLevel level = ProfileLevel::allocator) {
  return std::make_shared<detail::AllocatorSource<B>>(allocator, level);
}

/// A source reading `device`: its default allocator (default_allocator(device)) at allocator
/// level; at device level only the device's account, which the default allocator's backend
/// reports (creating that allocator allocates no device memory).
[[nodiscard]] inline std::shared_ptr<MemorySource> make_memory_source(const Device& device,
                                                                      ProfileLevel level = ProfileLevel::allocator) {
  return make_memory_source(default_allocator(device), level);
}

/// Which optional parts a reading includes.
struct ReadingOptions {
  bool cpu_memory = false;     ///< read the process RSS (~0.4 us)
  bool device_memory = false;  ///< read the device's used memory (one cudaMemGetInfo)
};

namespace detail {

/// Fills the fresh snapshot `s` with one reading of `source` at steady-clock time `now`, with
/// allocator gauges `g` already read (ignored at device level). At device level the device's
/// used memory is always read. Fills in place: scopes call this twice each, and moves cost there.
inline void fill_reading(MemorySnapshot& s, const MemorySource& source, const AllocatorGauges& g,
                         std::string_view operation, std::chrono::steady_clock::time_point now,
                         ReadingOptions options) {
  s.timestamp = wall_seconds(now);
  s.device_id = source.device_id();
  s.operation.assign(operation);
  s.allocator_level = source.allocator_level();
  if (s.allocator_level) {
    s.allocated_memory = g.allocated_bytes;
    s.reserved_memory = g.reserved_bytes;
    s.active_memory = g.active_bytes;
    s.inactive_memory = g.inactive_split_bytes;
  }
  if (options.device_memory || !s.allocator_level) {
    const MemInfo info = source.mem_get_info();
    s.device_used_memory = static_cast<std::int64_t>(info.total - info.free);
    s.device_total_memory = static_cast<std::int64_t>(info.total);
    s.external_memory = static_cast<std::int64_t>(source.external_memory());
  }
  if (options.cpu_memory) s.cpu_memory = process_rss_bytes();
}

}  // namespace detail

/// One reading of `source` now, labelled `operation`.
[[nodiscard]] inline MemorySnapshot read_memory(const MemorySource& source, std::string_view operation,
                                                ReadingOptions options = {}) {
  MemorySnapshot s;
  detail::fill_reading(s, source, source.gauges(), operation, std::chrono::steady_clock::now(), options);
  return s;
}

GPUMEMPROF_NAMESPACE_END

// The CUDA and history side of the sources: in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/memory_source-inl.hpp"
#endif
