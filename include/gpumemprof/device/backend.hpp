// Layer 1: the narrow interface every device backend offers the allocator.
//
// A backend owns one device. It hands out device memory in large pieces (the allocator's
// segments), reports the device's free/total memory, and records/queries events on streams so
// the allocator can tell when a block used on another stream may be reused. All device and
// runtime calls of the library go through a backend; the allocator core never touches CUDA.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// An opaque stream handle. Holds a cudaStream_t (or a simulated stream number); 0 is the
/// device's default stream.
struct Stream {
  std::uintptr_t id = 0;

  constexpr Stream() noexcept = default;
  constexpr explicit Stream(std::uintptr_t value) noexcept : id(value) {}
  /// From any stream pointer type (cudaStream_t is `CUstream_st*`). Explicit: a pointer passed
  /// where a stream is expected (record_stream(stream, ptr)) does not compile.
  template <class T>
  constexpr explicit Stream(T* handle) noexcept : id(reinterpret_cast<std::uintptr_t>(handle)) {}
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return reinterpret_cast<T*>(id);
  }
  friend constexpr bool operator==(Stream, Stream) noexcept = default;
  friend constexpr auto operator<=>(Stream, Stream) noexcept = default;
};

/// An opaque, backend-owned event handle.
struct Event {
  std::uintptr_t id = 0;
  friend constexpr bool operator==(Event, Event) noexcept = default;
};

/// Device memory as the device reports it, in bytes.
struct MemInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

/// One virtual-memory reservation for expandable segments: `size` bytes of address space from
/// `base`, backed by physical allocations of `page` bytes each (c10's segment size: 20 MiB in
/// PyTorch's large pool, 2 MiB in its small pool) wherever it is mapped.
struct Reservation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::size_t page = 0;
};

/// What the allocator needs from a device. `malloc` returns nullptr when the device is out of
/// memory (and leaves no sticky error behind); every other failure throws DeviceRuntimeError.
template <class B>
concept DeviceBackend = requires(B& b, const B& cb, std::size_t n, void* p, Stream s, Event e) {
  { b.malloc(n) } -> std::same_as<void*>;
  { b.free(p) } -> std::same_as<void>;
  { b.mem_get_info() } -> std::same_as<MemInfo>;
  { b.record_event(s) } -> std::same_as<Event>;  // an event that completes after s's current work
  { b.query_event(e) } -> std::same_as<bool>;    // true when complete
  { b.synchronize_event(e) } -> std::same_as<void>;
  { b.release_event(e) } -> std::same_as<void>;  // back to the backend's event pool
  { cb.index() } -> std::convertible_to<int>;
  { cb.name() } -> std::convertible_to<std::string>;  // "cuda:0", "sim:1", "host"
};

/// How strictly a thread's calls are checked while a stream capture is under way
/// (cudaStreamCaptureMode). Under `global`, a call that may synchronize (malloc, free, event
/// queries) fails while any thread captures in global mode; under `per_thread`, while this thread
/// captures; under `relaxed`, never. Work queued on a capturing stream is never legal to wait for.
enum class CaptureMode { global = 0, per_thread = 1, relaxed = 2 };

/// Backends that know about stream capture (CUDA graphs): whether a stream is capturing now, and
/// this thread's capture mode, exchanged (cudaThreadExchangeStreamCaptureMode). The allocator asks
/// before it calls anything that capture forbids; backends without these never capture.
template <class B>
concept CaptureAwareBackend = DeviceBackend<B> && requires(B& b, Stream s, CaptureMode m) {
  { b.is_capturing(s) } -> std::same_as<bool>;
  { b.exchange_capture_mode(m) } -> std::same_as<CaptureMode>;
};

/// Backends that also offer virtual-memory mapping (for expandable segments): reserve address
/// space whose physical allocations are `page` bytes each (a multiple of `granularity()`), and
/// map/unmap whole pages inside it. A page is one physical allocation, created and mapped with one
/// call each (cuMemCreate, cuMemMap) and released when unmapped, as c10's ExpandableSegment does;
/// the driver cannot unmap part of one, so offsets and sizes of map and unmap are multiples of the
/// reservation's page. Unmapping memory that queued work may still touch is the caller's to
/// prevent: it synchronizes the stream that used the memory first (synchronize_stream).
template <class B>
concept VirtualMemoryBackend = DeviceBackend<B> &&
    requires(B& b, const B& cb, std::size_t n, Reservation r, std::size_t off, Stream s) {
  { cb.granularity() } -> std::same_as<std::size_t>;  // the driver's minimum page
  { b.reserve(n, n) } -> std::same_as<Reservation>;   // (bytes, page); size 0 on failure
  { b.release(r) } -> std::same_as<void>;             // every page unmapped first
  { b.map(r, off, n) } -> std::same_as<bool>;         // false when out of memory (nothing mapped then)
  { b.unmap(r, off, n) } -> std::same_as<void>;       // releases the pages' physical memory
  { b.synchronize_stream(s) } -> std::same_as<void>;  // waits for the stream's queued work
};

GPUMEMPROF_NAMESPACE_END
