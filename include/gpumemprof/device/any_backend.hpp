// Layer 1: a backend chosen at run time from a Device. The default per-device allocators hold
// one, so "cuda:0" and "sim:0" share one allocator type. Backend calls are rare (segment
// allocation, events), so the indirection costs nothing on the allocator's hot path.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/device/owner_memory.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class AnyBackend {
 public:
  template <DeviceBackend B>
  explicit AnyBackend(B backend) : impl_(std::make_unique<Model<B>>(std::move(backend))) {}

  /// The backend of `device`. Simulated devices take their capacity from
  /// $GPUMEMPROF_SIM_CAPACITY (e.g. "16GiB"; default 80 GiB) and the size of their CUDA context
  /// from $GPUMEMPROF_SIM_CONTEXT (e.g. "512MiB"; default 0).
  static AnyBackend for_device(const Device& device);

  [[nodiscard]] void* malloc(std::size_t n) { return impl_->malloc(n); }
  void free(void* p) { impl_->free(p); }
  [[nodiscard]] MemInfo mem_get_info() const { return impl_->mem_get_info(); }
  [[nodiscard]] Event record_event(Stream s) { return impl_->record_event(s); }
  [[nodiscard]] bool query_event(Event e) { return impl_->query_event(e); }
  void synchronize_event(Event e) { impl_->synchronize_event(e); }
  void release_event(Event e) { impl_->release_event(e); }
  [[nodiscard]] int index() const { return impl_->index(); }
  [[nodiscard]] std::string name() const { return impl_->name(); }

  /// The device's memory outside the allocator, as far as its ledger knows (empty for backends
  /// without one).
  [[nodiscard]] ExternalMemory external_memory() const { return impl_->external_memory(); }

  /// Whether `s` is capturing (CUDA graphs); false for backends that never capture.
  [[nodiscard]] bool is_capturing(Stream s) { return impl_->is_capturing(s); }
  /// This thread's capture mode, exchanged for `m` (relaxed for backends that never capture).
  CaptureMode exchange_capture_mode(CaptureMode m) { return impl_->exchange_capture_mode(m); }

  /// Whether the wrapped backend offers virtual-memory mapping (expandable segments).
  [[nodiscard]] bool supports_virtual_memory() const { return impl_->supports_vm(); }
  [[nodiscard]] std::size_t granularity() const { return impl_->granularity(); }
  [[nodiscard]] Reservation reserve(std::size_t n, std::size_t page) { return impl_->reserve(n, page); }
  void release(Reservation r) { impl_->release(r); }
  [[nodiscard]] bool map(Reservation r, std::size_t off, std::size_t n) { return impl_->map(r, off, n); }
  void unmap(Reservation r, std::size_t off, std::size_t n) { impl_->unmap(r, off, n); }
  void synchronize_stream(Stream s) { impl_->synchronize_stream(s); }
  /// A new stream of the device: a CUDA stream on cuda:N; elsewhere (no queued work) a fresh
  /// stream number. Pass it to destroy_stream when done.
  [[nodiscard]] Stream create_stream() { return impl_->create_stream(); }
  void destroy_stream(Stream s) { impl_->destroy_stream(s); }

  /// Whether the wrapped backend is a CUDA device's (CudaBackend).
  [[nodiscard]] bool is_cuda() const noexcept;

  /// The wrapped backend when it is a `B`, else nullptr (like std::function::target).
  template <class B>
  [[nodiscard]] B* target() noexcept {
    auto* m = dynamic_cast<Model<B>*>(impl_.get());
    return m != nullptr ? &m->backend : nullptr;
  }

 private:
  static void env_bytes(const char* name, std::string_view what, std::size_t& out);

  struct Concept {
    virtual ~Concept() = default;
    virtual void* malloc(std::size_t) = 0;
    virtual void free(void*) = 0;
    [[nodiscard]] virtual MemInfo mem_get_info() const = 0;
    virtual Event record_event(Stream) = 0;
    virtual bool query_event(Event) = 0;
    virtual void synchronize_event(Event) = 0;
    virtual void release_event(Event) = 0;
    [[nodiscard]] virtual int index() const = 0;
    [[nodiscard]] virtual std::string name() const = 0;
    [[nodiscard]] virtual ExternalMemory external_memory() const = 0;
    virtual bool is_capturing(Stream) = 0;
    virtual CaptureMode exchange_capture_mode(CaptureMode) = 0;
    [[nodiscard]] virtual bool supports_vm() const = 0;
    [[nodiscard]] virtual std::size_t granularity() const = 0;
    virtual Reservation reserve(std::size_t, std::size_t) = 0;
    virtual void release(Reservation) = 0;
    virtual bool map(Reservation, std::size_t, std::size_t) = 0;
    virtual void unmap(Reservation, std::size_t, std::size_t) = 0;
    virtual void synchronize_stream(Stream) = 0;
    virtual Stream create_stream() = 0;
    virtual void destroy_stream(Stream) = 0;
  };

  template <class B>
  struct Model final : Concept {
    explicit Model(B b) : backend(std::move(b)) {}
    void* malloc(std::size_t n) override { return backend.malloc(n); }
    void free(void* p) override { backend.free(p); }
    [[nodiscard]] MemInfo mem_get_info() const override { return backend.mem_get_info(); }
    Event record_event(Stream s) override { return backend.record_event(s); }
    bool query_event(Event e) override { return backend.query_event(e); }
    void synchronize_event(Event e) override { backend.synchronize_event(e); }
    void release_event(Event e) override { backend.release_event(e); }
    [[nodiscard]] int index() const override { return backend.index(); }
    [[nodiscard]] std::string name() const override { return backend.name(); }
    [[nodiscard]] ExternalMemory external_memory() const override {
      if constexpr (requires { backend.external_memory(); }) return backend.external_memory();
      return {};
    }
    bool is_capturing(Stream s) override {
      if constexpr (CaptureAwareBackend<B>) return backend.is_capturing(s);
      return false;
    }
    CaptureMode exchange_capture_mode(CaptureMode m) override {
      if constexpr (CaptureAwareBackend<B>) return backend.exchange_capture_mode(m);
      return CaptureMode::relaxed;
    }
    [[nodiscard]] bool supports_vm() const override {
      if constexpr (VirtualMemoryBackend<B>) {
        if constexpr (requires { backend.supports_virtual_memory(); }) return backend.supports_virtual_memory();
        return true;
      }
      return false;
    }
    [[nodiscard]] std::size_t granularity() const override {
      if constexpr (VirtualMemoryBackend<B>) return backend.granularity();
      return 0;
    }
    Reservation reserve(std::size_t n, std::size_t page) override {
      if constexpr (VirtualMemoryBackend<B>) return backend.reserve(n, page);
      unsupported();
    }
    void release(Reservation r) override {
      if constexpr (VirtualMemoryBackend<B>)
        backend.release(r);
      else
        unsupported();
    }
    bool map(Reservation r, std::size_t off, std::size_t n) override {
      if constexpr (VirtualMemoryBackend<B>) return backend.map(r, off, n);
      unsupported();
    }
    void unmap(Reservation r, std::size_t off, std::size_t n) override {
      if constexpr (VirtualMemoryBackend<B>)
        backend.unmap(r, off, n);
      else
        unsupported();
    }
    void synchronize_stream(Stream s) override {
      if constexpr (VirtualMemoryBackend<B>)
        backend.synchronize_stream(s);
      else
        unsupported();
    }
    Stream create_stream() override {
      if constexpr (requires { backend.create_stream(); }) return backend.create_stream();
      return Stream(++streams_made);  // a device without stream objects: numbers name streams
    }
    void destroy_stream(Stream s) override {
      if constexpr (requires { backend.destroy_stream(s); }) backend.destroy_stream(s);
    }
    [[noreturn]] void unsupported() const {
      throw DeviceRuntimeError(backend.name() + " does not support virtual memory mapping");
    }
    B backend;
    std::uintptr_t streams_made = 0;
  };

  std::unique_ptr<Concept> impl_;
};

static_assert(DeviceBackend<AnyBackend>);
static_assert(VirtualMemoryBackend<AnyBackend>);
static_assert(CaptureAwareBackend<AnyBackend>);

GPUMEMPROF_NAMESPACE_END

// The bodies of for_device() and is_cuda(), which know every concrete backend (CUDA, simulated,
// host): in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/device.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/device/any_backend-inl.hpp"
#endif
