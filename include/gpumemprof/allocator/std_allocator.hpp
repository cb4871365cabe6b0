// Layer 2: Allocator<T>, the caching allocator behind the standard Allocator requirements, for
// std::vector over host memory and thrust::device_vector over device memory
// (Allocator<T, thrust::device_ptr<T>>: thrust dispatches on the pointer type).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template <class T, class Pointer = T*, class Caching = DeviceAllocator>
class Allocator {
  static_assert(alignof(T) <= kMinBlockSize, "blocks are 512-byte aligned");

 public:
  using value_type = T;
  using pointer = Pointer;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;
  template <class U>
  struct rebind {
    using other = Allocator<U, typename std::pointer_traits<Pointer>::template rebind<U>, Caching>;
  };

  /// Memory the caller can touch: with raw pointers (std::vector, the default) the "host"
  /// allocator -- a raw pointer into device memory would crash the first container write -- and
  /// with fancy pointers (thrust::device_ptr) the current device's allocator. Name a device to
  /// put a raw-pointer container into device or simulated memory.
  Allocator() requires std::is_same_v<Caching, DeviceAllocator>
      : Allocator(default_allocator(std::is_pointer_v<Pointer> ? Device::host() : Device())) {}
  /// The default allocator of `device` ("host" for std::vector of real memory).
  explicit Allocator(const Device& device, Stream stream = {}) requires std::is_same_v<Caching, DeviceAllocator>
      : Allocator(default_allocator(device), stream) {}
  explicit Allocator(Caching& caching, Stream stream = {}) noexcept : caching_(&caching), stream_(stream) {}
  template <class U, class P>
  Allocator(const Allocator<U, P, Caching>& other) noexcept  // NOLINT(google-explicit-constructor)
      : caching_(&other.caching()), stream_(other.stream()) {}

  [[nodiscard]] pointer allocate(size_type n) {
    if (n > std::numeric_limits<size_type>::max() / sizeof(T)) throw std::bad_array_new_length();
    return pointer(static_cast<T*>(caching_->allocate(n * sizeof(T), stream_)));
  }
  void deallocate(pointer p, size_type /*n*/) { caching_->deallocate(raw(p)); }

  [[nodiscard]] Caching& caching() const noexcept { return *caching_; }
  [[nodiscard]] Stream stream() const noexcept { return stream_; }

  template <class U, class P>
  friend bool operator==(const Allocator& a, const Allocator<U, P, Caching>& b) noexcept {
    return &a.caching() == &b.caching() && a.stream() == b.stream();
  }

 private:
  static T* raw(pointer p) noexcept {
    if constexpr (std::is_pointer_v<pointer>) {
      return p;
    } else {
      return p.get();  // thrust::device_ptr and similar fancy pointers
    }
  }
  Caching* caching_;
  Stream stream_;
};

GPUMEMPROF_NAMESPACE_END
