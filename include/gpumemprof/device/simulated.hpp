// Layer 1: a simulated device. It reserves a range of address space, hands out pieces of that
// range as "device memory" against a configurable capacity, and keeps events pending until a
// test completes them. Everything above the device layer can therefore be tested,
// deterministically, on a machine without a GPU.
// Its memory is host memory, committed lazily: the range is an anonymous MAP_NORESERVE mapping,
// so code written for a GPU that touches device memory from the host (containers, algorithms)
// runs here too, and only pages written to take RAM. Freed and unmapped ranges are given back
// at once (MADV_DONTNEED): RAM follows what is live, and memory handed out again reads as zeros.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/address_ranges.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/device/driver_placement.hpp"
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/device/physical_pages.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct SimulatedOptions {
  std::size_t capacity = std::size_t{80} << 30;    ///< device memory, bytes (default 80 GiB)
  int index = 0;                                   ///< the N of "sim:N"
  std::size_t granularity = std::size_t{2} << 20;  ///< allocation/mapping granularity, bytes
  bool auto_complete_events = false;               ///< events complete as soon as recorded
  std::size_t context_bytes = 0;                   ///< taken from the start, as a CUDA context takes it
  /// Where mallocs land, in call order: the addresses a recording driver gave its cudaMallocs (as
  /// in PyTorch's segment_alloc history entries), kept in their layout -- shifted as a whole into
  /// this device's range. The caching allocator breaks ties between equal-size free blocks by
  /// address, so replays need the driver's layout: these addresses, or placement_model's driver
  /// model (which alone gives every trace in tests/data PyTorch's figures). A malloc past the
  /// list, or whose recorded range is taken or of another size, goes where placement_model puts it.
  std::vector<std::pair<std::uintptr_t, std::size_t>> placement{};  ///< (address, bytes) per malloc
  /// How mallocs without a recorded address are placed: as the CUDA driver does (driver, the
  /// default: replays then give PyTorch's figures; driver_placement.hpp has the rules), or first
  /// fit at the lowest address (lowest_first: rising addresses, simpler to reason about).
  enum class Placement { driver, lowest_first } placement_model = Placement::driver;
  DriverLayout driver_layout{};  ///< the driver's rules, for placement_model == driver
};

/// Counts of the calls the allocator made, for tests and the replay tool.
struct SimulatedCounters {
  std::size_t malloc_calls = 0;
  std::size_t malloc_failures = 0;  ///< mallocs refused for lack of capacity
  std::size_t free_calls = 0;
  std::size_t events_recorded = 0;
  std::size_t event_queries = 0;
  std::size_t event_synchronizations = 0;
  std::size_t map_calls = 0;          ///< map() calls (each maps one or more pages)
  std::size_t unmap_calls = 0;        ///< unmap() calls
  std::size_t pages_mapped = 0;       ///< bytes mapped by map(), in units of the granularity
  std::size_t pages_unmapped = 0;     ///< bytes unmapped by unmap(), in units of the granularity
  std::size_t physical_created = 0;   ///< physical allocations made by map() (one per page of its reservation)
  std::size_t physical_released = 0;  ///< physical allocations released by unmap()
  std::size_t reservations = 0;       ///< reserve() calls that succeeded
  std::size_t releases = 0;           ///< release() calls
  std::size_t stream_synchronizations = 0;
  std::size_t capture_violations = 0;  ///< calls that stream capture forbids (each failed, as on a GPU)
};

class SimulatedBackend {
 public:
  explicit SimulatedBackend(SimulatedOptions options = {}) : s_(std::make_unique<State>(options)) {}

  // --- DeviceBackend -------------------------------------------------------------------------
  [[nodiscard]] void* malloc(std::size_t bytes) {
    std::lock_guard lock(s_->mutex);
    check_unsafe_call_locked("cudaMalloc");
    ++s_->counters.malloc_calls;
    const std::size_t charged = round_up(std::max<std::size_t>(bytes, 1), s_->opt.granularity);
    if (charged > s_->opt.capacity - std::min(s_->opt.capacity, used_locked())) {
      ++s_->counters.malloc_failures;
      return nullptr;
    }
    const std::uintptr_t addr = s_->place(charged);
    if (addr == 0) {  // address space exhausted (only with pathological fragmentation)
      ++s_->counters.malloc_failures;
      return nullptr;
    }
    s_->live.emplace(addr, charged);
    s_->used += charged;
    return reinterpret_cast<void*>(addr);
  }

  void free(void* ptr) {
    std::lock_guard lock(s_->mutex);
    const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
    auto it = s_->live.find(addr);
    if (it == s_->live.end()) {
      throw DeviceRuntimeError(name() + ": free of " + hex(addr) + ", which this simulated device did not allocate");
    }
    check_unsafe_call_locked("cudaFree");
    ++s_->counters.free_calls;
    s_->used -= it->second;
    s_->discard(addr, it->second);  // before giving it back: the range may be handed out again at once
    s_->give_malloc(addr, it->second);
    s_->live.erase(it);
  }

  /// From the next malloc on, mallocs land at these recorded addresses, in order (as
  /// SimulatedOptions::placement says).
  void set_placement(std::vector<std::pair<std::uintptr_t, std::size_t>> placement) {
    std::lock_guard lock(s_->mutex);
    s_->opt.placement = std::move(placement);
    s_->start_placement();
  }

  [[nodiscard]] MemInfo mem_get_info() const {
    std::lock_guard lock(s_->mutex);
    const std::size_t used = std::min(s_->opt.capacity, used_locked());
    return {s_->opt.capacity - used, s_->opt.capacity};
  }

  [[nodiscard]] Event record_event(Stream stream) {
    std::lock_guard lock(s_->mutex);
    check_stream_locked(stream, "record an event on");
    check_not_capturing_locked(stream, "cudaEventRecord");
    ++s_->counters.events_recorded;
    const std::uintptr_t id = ++s_->next_event;
    const bool done = s_->opt.auto_complete_events;
    s_->events.emplace(id, EventState{stream, done});
    if (!done) s_->pending_by_stream[stream.id].push_back(id);
    return Event{id};
  }

  [[nodiscard]] bool query_event(Event e) {
    std::lock_guard lock(s_->mutex);
    ++s_->counters.event_queries;
    check_not_capturing_locked(s_->event(e).stream, "cudaEventQuery");
    return s_->event(e).complete;
  }

  void synchronize_event(Event e) {
    std::lock_guard lock(s_->mutex);
    ++s_->counters.event_synchronizations;
    check_not_capturing_locked(s_->event(e).stream, "cudaEventSynchronize");
    // Waiting for an event means its stream's work up to it is done.
    complete_stream_locked(s_->event(e).stream, e.id);
  }

  void release_event(Event e) {
    std::lock_guard lock(s_->mutex);
    s_->event(e);  // validates
    s_->events.erase(e.id);
  }

  [[nodiscard]] int index() const noexcept { return s_->opt.index; }
  [[nodiscard]] std::string name() const { return "sim:" + std::to_string(s_->opt.index); }

  // --- VirtualMemoryBackend --------------------------------------------------------------------
  [[nodiscard]] std::size_t granularity() const noexcept { return s_->opt.granularity; }

  /// Address space for `bytes` (rounded up to whole pages) whose physical allocations will be
  /// `page` bytes each (a multiple of the granularity).
  [[nodiscard]] Reservation reserve(std::size_t bytes, std::size_t page) {
    std::lock_guard lock(s_->mutex);
    check_unsafe_call_locked("cuMemAddressReserve");
    s_->vm.check_page(page);
    const std::size_t size = round_up(bytes, page);
    std::uintptr_t base = s_->va.take_lowest(size);
    // The driver's virtual address space is many times the device: a reservation that does not
    // fit the range taken at construction gets a range of its own.
    if (base == 0 && s_->add_address_space(size)) base = s_->va.take_lowest(size);
    if (base == 0) return {};
    const Reservation r{base, size, page};
    s_->vm.reserve(r);
    ++s_->counters.reservations;
    return r;
  }

  void release(Reservation r) {
    std::lock_guard lock(s_->mutex);
    s_->vm.release(r);
    ++s_->counters.releases;
    s_->va.give(r.base, r.size);
  }

  /// Maps [offset, offset + bytes) of `r`: one physical allocation per page of r.page bytes.
  [[nodiscard]] bool map(Reservation r, std::size_t offset, std::size_t bytes) {
    std::lock_guard lock(s_->mutex);
    check_unsafe_call_locked("cuMemCreate/cuMemMap");
    ++s_->counters.map_calls;
    s_->vm.check_map(r, offset, bytes);
    if (bytes > s_->opt.capacity - std::min(s_->opt.capacity, used_locked())) {
      ++s_->counters.malloc_failures;
      return false;
    }
    s_->vm.map(r, offset, bytes);
    s_->counters.pages_mapped += bytes / s_->opt.granularity;
    s_->counters.physical_created += bytes / r.page;
    s_->mapped += bytes;
    return true;
  }

  /// Unmaps and releases whole physical allocations; throws, as the driver fails, for part of one.
  void unmap(Reservation r, std::size_t offset, std::size_t bytes) {
    std::lock_guard lock(s_->mutex);
    check_unsafe_call_locked("cuMemUnmap");
    ++s_->counters.unmap_calls;
    s_->vm.unmap(r, offset, bytes);
    s_->discard(r.base + offset, bytes);
    s_->counters.pages_unmapped += bytes / s_->opt.granularity;
    s_->counters.physical_released += bytes / r.page;
    s_->mapped -= bytes;
  }

  /// The physical allocations mapped now: bytes each -> how many.
  [[nodiscard]] std::map<std::size_t, std::size_t> physical_pages() const {
    std::lock_guard lock(s_->mutex);
    return s_->vm.live();
  }

  /// Waiting for a stream means its work so far is done: its events complete.
  void synchronize_stream(Stream stream) {
    std::lock_guard lock(s_->mutex);
    check_stream_locked(stream, "synchronize");
    check_not_capturing_locked(stream, "cudaStreamSynchronize");
    ++s_->counters.stream_synchronizations;
    complete_stream_locked(stream, s_->next_event);
  }

  // --- Stream capture (CaptureAwareBackend) ------------------------------------------------------
  /// Whether `stream` is capturing (between begin_capture and end_capture).
  [[nodiscard]] bool is_capturing(Stream stream) const {
    std::lock_guard lock(s_->mutex);
    return s_->captures.count(stream.id) != 0;
  }
  /// This thread's capture mode, exchanged (cudaThreadExchangeStreamCaptureMode).
  CaptureMode exchange_capture_mode(CaptureMode mode) {
    std::lock_guard lock(s_->mutex);
    auto [it, fresh] = s_->thread_modes.try_emplace(std::this_thread::get_id(), CaptureMode::global);
    return std::exchange(it->second, mode);
  }
  /// Puts `stream` in capture mode from this thread (cudaStreamBeginCapture with `mode`): until
  /// end_capture, the calls CUDA forbids during capture throw DeviceRuntimeError and invalidate
  /// the capture, as on a GPU -- the allocator's memory calls (malloc, free, map, unmap,
  /// reserve) under the rules of `mode` and of the calling thread's mode, and any event record,
  /// event query or wait on a capturing stream.
  void begin_capture(Stream stream, CaptureMode mode = CaptureMode::global) {
    std::lock_guard lock(s_->mutex);
    check_stream_locked(stream, "capture");
    if (!s_->captures.try_emplace(stream.id, Capture{mode, std::this_thread::get_id(), false}).second) {
      throw DeviceRuntimeError(name() + ": stream " + hex(stream.id) + " is already capturing");
    }
  }
  /// Ends the capture of `stream` (cudaStreamEndCapture): true when the captured graph is valid,
  /// false when a forbidden call invalidated it.
  bool end_capture(Stream stream) {
    std::lock_guard lock(s_->mutex);
    auto it = s_->captures.find(stream.id);
    if (it == s_->captures.end()) {
      throw DeviceRuntimeError(name() + ": end_capture of stream " + hex(stream.id) + ", which is not capturing");
    }
    const bool valid = !it->second.invalidated;
    s_->captures.erase(it);
    return valid;
  }

  // --- Test controls -----------------------------------------------------------------------------
  /// Completes every event recorded so far on `stream` (its work "finished").
  void complete_events(Stream stream) {
    std::lock_guard lock(s_->mutex);
    complete_stream_locked(stream, s_->next_event);
  }
  /// Destroys `stream` (cudaStreamDestroy): its work completes, and any later use of the handle
  /// throws DeviceRuntimeError until create_stream() makes a stream with that handle again.
  void destroy_stream(Stream stream) {
    std::lock_guard lock(s_->mutex);
    complete_stream_locked(stream, s_->next_event);
    s_->destroyed.insert(stream.id);
  }
  /// A new stream that reuses the handle of a destroyed one.
  void create_stream(Stream stream) {
    std::lock_guard lock(s_->mutex);
    s_->destroyed.erase(stream.id);
  }
  /// Completes every event recorded so far on any stream.
  void complete_all_events() {
    std::lock_guard lock(s_->mutex);
    for (auto& [stream, q] : s_->pending_by_stream) {
      for (auto id : q) s_->events.at(id).complete = true;
      q.clear();
    }
  }
  /// Pretends another process (or a non-caching library) uses `bytes` of the device.
  void set_external_usage(std::size_t bytes) {
    std::lock_guard lock(s_->mutex);
    s_->external = bytes;
  }
  // --- Memory outside the allocator (bodies: simulated_external-inl.hpp) ------------------------
  /// Stands for a library's own cudaMalloc of `bytes` on this device, by `owner` ("libnccl.so")
  /// from `site`: the device charges whole granules against its capacity and the device's ledger
  /// records the allocation. nullptr when the device has no room.
  /// With stacks on (track_external_memory({.stacks = true})), the ledger keeps the caller's stack.
  [[nodiscard]] void* external_malloc(std::size_t bytes, std::string_view owner, std::string_view site = {});
  /// The free of an external_malloc.
  void external_free(void* ptr);
  // --- A memory pool of the program's own (cudaMemPoolCreate), outside the allocator -------------
  /// Granule in which a pool reserves device memory (a CUDA pool reserved 224 MiB for one 200 MiB
  /// allocation on an H200: whole 32 MiB steps).
  static constexpr std::size_t pool_granule = std::size_t{32} << 20;
  /// Stands for cudaMemPoolCreate by `owner` from `site`. The pool reserves device memory in
  /// pool_granule steps as its allocations need it and keeps it when they are freed;
  /// external_pool_trim gives back what it holds unused (cudaMemPoolTrimTo) and destroying it
  /// gives back everything. The ledger lists the pool's reserved bytes under its owner -- as the
  /// CUDA capture lists a real pool's (ExternalLedger::record_pool) -- and nothing once it is gone.
  [[nodiscard]] std::uint64_t external_pool_create(std::string_view owner, std::string_view site = {});
  /// cudaMallocFromPoolAsync: `bytes` from `pool`; nullptr when the device has no room to grow it.
  [[nodiscard]] void* external_pool_malloc(std::uint64_t pool, std::size_t bytes);
  /// cudaFreeAsync of an external_pool_malloc: the pool keeps its reservation.
  void external_pool_free(std::uint64_t pool, void* ptr);
  /// cudaMemPoolTrimTo(pool, keep): gives back reserved memory its live allocations do not need,
  /// keeping at least `keep` bytes reserved.
  void external_pool_trim(std::uint64_t pool, std::size_t keep);
  /// cudaMemPoolDestroy: the pool's memory goes back to the device, its line leaves the ledger.
  void external_pool_destroy(std::uint64_t pool);
  /// The device's ledger: external allocations by owner, and the context.
  [[nodiscard]] ExternalMemory external_memory() const;

  [[nodiscard]] SimulatedCounters counters() const {
    std::lock_guard lock(s_->mutex);
    return s_->counters;
  }
  /// Bytes currently mapped into reservations.
  [[nodiscard]] std::size_t mapped_bytes() const {
    std::lock_guard lock(s_->mutex);
    return s_->mapped;
  }
  /// Live reservations.
  [[nodiscard]] std::size_t reservation_count() const {
    std::lock_guard lock(s_->mutex);
    return s_->vm.reservations();
  }
  /// Bytes currently handed out by malloc and map (not counting external usage).
  [[nodiscard]] std::size_t used_bytes() const {
    std::lock_guard lock(s_->mutex);
    return s_->used + s_->mapped;
  }
  [[nodiscard]] std::size_t capacity() const noexcept { return s_->opt.capacity; }
  [[nodiscard]] std::size_t pending_events() const {
    std::lock_guard lock(s_->mutex);
    std::size_t n = 0;
    for (const auto& [stream, q] : s_->pending_by_stream) n += q.size();
    return n;
  }

 private:
  struct EventState {
    Stream stream;
    bool complete = false;
  };
  struct Capture {
    CaptureMode mode = CaptureMode::global;
    std::thread::id thread;
    bool invalidated = false;
  };
  struct SimPool {
    std::string owner, site;
    std::vector<std::uintptr_t> stack;
    std::size_t reserved = 0, live = 0, next_offset = 0;
    std::map<std::uintptr_t, std::size_t> allocations;  // address -> bytes
  };

  struct State {
    explicit State(const SimulatedOptions& o) : opt(o) {
      if (opt.granularity == 0 || (opt.granularity & (opt.granularity - 1)) != 0) {
        throw std::invalid_argument("SimulatedOptions.granularity must be a power of two, got " +
                                    std::to_string(opt.granularity));
      }
      // Address space for mallocs and reservations: eight times the capacity, so expandable
      // reservations (9/8 of the capacity each, one per stream and pool) and fragmentation
      // never run out of addresses before memory runs out. Where the process has less address
      // space (ThreadSanitizer's layout holds a few such devices), half as much, down to the
      // capacity itself; reservations that no longer fit then get ranges of their own.
      const std::size_t unit = round_up(std::max<std::size_t>(opt.capacity, opt.granularity), opt.granularity);
      // The driver model's context and the rounding of its top to a chunk come on top of that.
      const bool driver_model = opt.placement_model == SimulatedOptions::Placement::driver;
      const std::size_t chunk = std::max(opt.driver_layout.chunk, opt.granularity);
      const std::size_t extra = driver_model ? round_up(opt.driver_layout.context, opt.granularity) + chunk : 0;
      if (driver_model && (chunk & (chunk - 1)) != 0) {
        throw std::invalid_argument("SimulatedOptions.driver_layout.chunk must be a power of two, got " +
                                    std::to_string(chunk));
      }
      void* p = MAP_FAILED;
      for (std::size_t factor = 8; p == MAP_FAILED && factor >= 1; factor /= 2) {
        span = unit * factor + extra;
        p = ::mmap(nullptr, span + opt.granularity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
      }
      if (p == MAP_FAILED) {
        throw DeviceRuntimeError("sim:" + std::to_string(opt.index) + ": cannot reserve " + std::to_string(span >> 20) +
                                 " MiB of address space for the simulated device; lower its capacity "
                                 "(GPUMEMPROF_SIM_CAPACITY, e.g. 16GiB, or SimulatedOptions.capacity)");
      }
      // Out of core dumps: a dump would walk the whole range (eight times the capacity) page by page.
      ::madvise(p, span + opt.granularity, MADV_DONTDUMP);
      mapping = p;
      base = round_up(reinterpret_cast<std::uintptr_t>(p), opt.granularity);
      va.give(base, span);
      if (driver_model) {
        // The driver model fills the address space from its top (a multiple of its chunk) down.
        opt.driver_layout.chunk = chunk;
        driver.emplace(va, (base + span) / chunk * chunk, opt.granularity, opt.driver_layout);
      }
      start_placement();
    }
    void start_placement() {
      next_placement = 0;
      if (opt.placement.empty()) return;
      placement_low = opt.placement.front().first;
      for (const auto& [a, n] : opt.placement) placement_low = std::min(placement_low, a);
      placement_low -= placement_low % opt.granularity;
    }
    // More address space, for a reservation of `bytes` the ranges held cannot place (where the
    // process has little, as under ThreadSanitizer, the first range may be as small as the
    // capacity). False when the process has none left.
    bool add_address_space(std::size_t bytes) {
      const std::size_t length = bytes + opt.granularity;
      void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return false;
      ::madvise(p, length, MADV_DONTDUMP);
      try {
        extra_mappings.emplace_back(p, length);
      } catch (...) {
        ::munmap(p, length);
        throw;
      }
      va.give(round_up(reinterpret_cast<std::uintptr_t>(p), opt.granularity), bytes);
      return true;
    }
    ~State() {
      for (const auto& [p, length] : extra_mappings) ::munmap(p, length);
      ::munmap(mapping, span + opt.granularity);
    }
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    // The next recorded address, shifted into this range, when it is free and of this size;
    // else where the placement model puts it.
    std::uintptr_t place(std::size_t size) {
      if (next_placement < opt.placement.size()) {
        const auto [recorded, bytes] = opt.placement[next_placement++];
        const std::uintptr_t want = base + (recorded - placement_low);
        if (bytes == size && want % opt.granularity == 0 && va.take(want, size)) return want;
      }
      return driver ? driver->allocate(size) : va.take_lowest(size);
    }
    void give_malloc(std::uintptr_t addr, std::size_t size) {
      if (driver && driver->owns(addr)) {
        driver->free(addr, size);
      } else {
        va.give(addr, size);
      }
    }
    // Gives the pages of a range back to the system; they read as zeros when touched again.
    void discard(std::uintptr_t addr, std::size_t size) const noexcept {
      ::madvise(reinterpret_cast<void*>(addr), size, MADV_DONTNEED);
    }
    EventState& event(Event e) {
      auto it = events.find(e.id);
      if (it == events.end()) {
        throw DeviceRuntimeError("sim:" + std::to_string(opt.index) + ": unknown event " + std::to_string(e.id));
      }
      return it->second;
    }

    SimulatedOptions opt;
    mutable std::mutex mutex;
    void* mapping = nullptr;
    std::uintptr_t base = 0;
    std::size_t span = 0;
    std::vector<std::pair<void*, std::size_t>> extra_mappings;  // add_address_space's ranges
    AddressRanges va;                                           // free address space
    std::optional<DriverPlacement> driver;                      // mallocs, as the driver places them
    std::size_t next_placement = 0;                             // opt.placement's next entry
    std::uintptr_t placement_low = 0;                           // its lowest address (page aligned)
    std::map<std::uintptr_t, std::size_t> live;                 // malloc'd address -> charged bytes
    detail::PhysicalPages vm{"sim:" + std::to_string(opt.index), opt.granularity};  // reservations, mappings
    std::size_t used = 0;
    std::size_t mapped = 0;
    std::size_t external = 0;
    std::uintptr_t next_event = 0;
    std::unordered_map<std::uintptr_t, EventState> events;
    std::map<std::uintptr_t, std::deque<std::uintptr_t>> pending_by_stream;
    std::set<std::uintptr_t> destroyed;                   // destroy_stream()'s handles
    std::map<std::uintptr_t, Capture> captures;           // capturing streams
    std::map<std::thread::id, CaptureMode> thread_modes;  // exchange_capture_mode (default global)
    SimulatedCounters counters;
    std::map<std::uintptr_t, std::size_t> external_live;  // external_malloc'd address -> charged bytes
    std::size_t external_charged = 0;
    ExternalLedger ledger;
    std::map<std::uint64_t, SimPool> pools;  // external_pool_create's pools by ledger id
    std::uint64_t pools_created = 0;
  };

  SimPool& pool_locked(std::uint64_t pool, const char* what);  // the pool, or throws
  void set_pool_reserved_locked(std::uint64_t id, SimPool& p, std::size_t reserved);

  static std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
  static std::string hex(std::uintptr_t v) { return detail::PhysicalPages::hex(v); }
  [[nodiscard]] std::size_t used_locked() const {
    return s_->used + s_->mapped + s_->external + s_->external_charged + s_->opt.context_bytes;
  }

  void check_stream_locked(Stream stream, const char* what) const {
    if (s_->destroyed.count(stream.id) != 0) {
      throw DeviceRuntimeError(name() + ": cannot " + what + " stream " + hex(stream.id) + ": it was destroyed");
    }
  }

  // CUDA's rule for calls that may synchronize during capture: the calling thread's mode
  // (global unless exchanged) decides which captures forbid them.
  void check_unsafe_call_locked(const char* call) {
    if (s_->captures.empty()) return;
    const auto self = std::this_thread::get_id();
    auto m = s_->thread_modes.find(self);
    const CaptureMode mine = m == s_->thread_modes.end() ? CaptureMode::global : m->second;
    if (mine == CaptureMode::relaxed) return;
    for (auto& [stream, c] : s_->captures) {
      const bool own = c.thread == self && c.mode != CaptureMode::relaxed;
      const bool other = mine == CaptureMode::global && c.mode == CaptureMode::global;
      if (own || other) capture_violation_locked(call, stream);
    }
  }
  // Record, query and wait are never legal on a capturing stream.
  void check_not_capturing_locked(Stream stream, const char* call) {
    if (s_->captures.count(stream.id) != 0) capture_violation_locked(call, stream.id);
  }
  [[noreturn]] void capture_violation_locked(const char* call, std::uintptr_t stream) {
    ++s_->counters.capture_violations;
    for (auto& [id, c] : s_->captures) c.invalidated = true;
    throw DeviceRuntimeError(name() + ": " + call + ": operation not permitted when stream is capturing " +
                             "(cudaErrorStreamCaptureUnsupported; stream " + hex(stream) + ")");
  }

  // Events on one stream complete in order: completing one completes all recorded before it.
  void complete_stream_locked(Stream stream, std::uintptr_t up_to) {
    auto it = s_->pending_by_stream.find(stream.id);
    if (it == s_->pending_by_stream.end()) return;
    auto& q = it->second;
    while (!q.empty() && q.front() <= up_to) {
      // An event may be released before it completes (cudaEventDestroy allows it): skip it.
      if (auto e = s_->events.find(q.front()); e != s_->events.end()) e->second.complete = true;
      q.pop_front();
    }
  }

  std::unique_ptr<State> s_;
};

static_assert(VirtualMemoryBackend<SimulatedBackend>);

GPUMEMPROF_NAMESPACE_END

// The bodies of the memory outside the allocator: in the compiled library under
// GPUMEMPROF_COMPILED_LIB (lib/device.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/device/simulated_external-inl.hpp"
#endif
