// Layer 3: C++ call stacks for allocation history -- the only door to Boost.Stacktrace.
//
// Capture is on the allocator's hot path, so it only collects raw return addresses (a bounded
// number, no heap, no symbols). Symbolization (function, file, line through Boost.Stacktrace's
// libbacktrace backend) happens when a snapshot is built, once per address, cached for the
// life of the process.
//
// Built with GPUMEMPROF_WITH_STACKTRACE=0, capture returns no frames and nothing here needs
// Boost. With 1, Boost.Stacktrace must be in link mode (BOOST_STACKTRACE_LINK and
// -lboost_stacktrace_backtrace -ldl): without it the headers silently fall back to a backend
// that knows addresses only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

#if GPUMEMPROF_WITH_STACKTRACE
#if !defined(BOOST_STACKTRACE_LINK) && !defined(BOOST_STACKTRACE_USE_BACKTRACE)
#error \
    "GPUMEMPROF_WITH_STACKTRACE=1 needs Boost.Stacktrace with file/line support: define BOOST_STACKTRACE_LINK and link -lboost_stacktrace_backtrace -ldl, or define BOOST_STACKTRACE_USE_BACKTRACE and link GCC's libbacktrace.a -ldl (the Meson, pkg-config and CMake dependencies do this)"
#endif
#endif

GPUMEMPROF_NAMESPACE_BEGIN

/// True when this build captures C++ stacks.
inline constexpr bool stacks_available = GPUMEMPROF_WITH_STACKTRACE != 0;

/// The line warn_stacks_unavailable() prints.
inline constexpr const char* stacks_unavailable_warning =
    "gpumemprof: allocation history records no C++ stacks: this program was built without them "
    "(GPUMEMPROF_WITH_STACKTRACE is 0, as with plain `-I include`). Build with the pkg-config, CMake or Meson "
    "dependency, or add -DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK -g1 and link "
    "-lboost_stacktrace_backtrace -ldl.\n";

/// Says so on stderr, once per process, when history asks for C++ stacks that this build
/// cannot capture (the headers alone build without them, silently otherwise).
inline void warn_stacks_unavailable() {
  if constexpr (!stacks_available) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed)) std::fputs(stacks_unavailable_warning, stderr);
  }
}

namespace detail {
/// libgcc's unwinder (_Unwind_Backtrace): the general path, and the reference for tests.
/// Same contract as capture_stack().
std::size_t unwind_slow(std::uintptr_t* out, std::size_t max_frames, std::size_t skip = 0) noexcept;
}  // namespace detail

/// Fills `out` with up to `max_frames` return addresses of the calling thread, innermost first,
/// starting `skip` frames above the caller of capture_stack. Returns how many it wrote: 0 when
/// built without stack traces. No heap allocation once warmed up; safe on any thread.
/// (Never inlined: `skip` counts frames from its own.)
std::size_t capture_stack(std::uintptr_t* out, std::size_t max_frames, std::size_t skip = 0) noexcept;

/// Turns return addresses into frames, caching each address's frame forever. Thread-safe.
class Symbolizer {
 public:
  static Symbolizer& instance();

  /// The frame of a return address: function, source file and line of the call. The reference
  /// stays valid for the life of the process.
  const Frame& frame(std::uintptr_t return_address);

  /// True for frames of gpumemprof itself (the allocator, the recorder, the PyTorch bridge's
  /// library): snapshots start at the first frame outside the library, like PyTorch's stacks start
  /// in user code.
  static bool is_internal(const Frame& f);

 private:
  Symbolizer() = default;

  static Frame resolve(std::uintptr_t return_address);

  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Frame> cache_;
};

namespace detail {

/// The stack of an allocation outside the allocator as "function at file:line" frames (without
/// line tables, "function in binary"), from the first frame outside gpumemprof up to main
/// (device/external_memory.hpp calls it through its hook).
std::vector<std::string> symbolize_external_frames(const std::uintptr_t* frames, std::size_t count);

}  // namespace detail

GPUMEMPROF_NAMESPACE_END

// Capture and symbolization (Boost.Stacktrace): in the compiled library under GPUMEMPROF_COMPILED_LIB
// (lib/stacks.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/history/stacks-inl.hpp"
#endif
