// Layer 2: MemoryResource, the caching allocator as a std::pmr::memory_resource.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <string>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// A std::pmr::memory_resource over any CachingAllocator.
template <class Caching>
class BasicMemoryResource : public std::pmr::memory_resource {
 public:
  explicit BasicMemoryResource(Caching& caching, Stream stream = {}) noexcept : caching_(&caching), stream_(stream) {}
  [[nodiscard]] Caching& caching() const noexcept { return *caching_; }
  [[nodiscard]] Stream stream() const noexcept { return stream_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (alignment > kMinBlockSize) {
      throw std::invalid_argument("gpumemprof MemoryResource: alignment " + std::to_string(alignment) +
                                  " exceeds the 512-byte alignment of every block");
    }
    // A zero-byte request still gets a distinct pointer, as memory_resource requires.
    return caching_->allocate(bytes == 0 ? 1 : bytes, stream_);
  }
  void do_deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/) override { caching_->deallocate(p); }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const BasicMemoryResource*>(&other);
    return o != nullptr && o->caching_ == caching_ && o->stream_ == stream_;
  }
  Caching* caching_;
  Stream stream_;
};

/// A std::pmr::memory_resource over a default (per-device) allocator.
class MemoryResource final : public BasicMemoryResource<DeviceAllocator> {
 public:
  using BasicMemoryResource::BasicMemoryResource;
  /// Over the "host" allocator: std::pmr containers write through the pointers they get, so the
  /// default serves memory the host can touch (as Allocator<T>'s default does).
  MemoryResource() : MemoryResource(Device::host()) {}
  /// Over the default allocator of `device` (device memory is for code that never dereferences
  /// it on the host).
  explicit MemoryResource(const Device& device, Stream stream = {})
      : BasicMemoryResource(default_allocator(device), stream) {}
};

GPUMEMPROF_NAMESPACE_END
