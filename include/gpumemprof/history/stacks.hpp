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
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/history/snapshot.hpp"

#if GPUMEMPROF_WITH_STACKTRACE
#if !defined(BOOST_STACKTRACE_LINK) && !defined(BOOST_STACKTRACE_USE_BACKTRACE)
#error \
    "GPUMEMPROF_WITH_STACKTRACE=1 needs Boost.Stacktrace with file/line support: define BOOST_STACKTRACE_LINK and link -lboost_stacktrace_backtrace -ldl, or define BOOST_STACKTRACE_USE_BACKTRACE and link GCC's libbacktrace.a -ldl (the Meson, pkg-config and CMake dependencies do this)"
#endif
#include <dlfcn.h>
#include <unwind.h>

#include <boost/stacktrace/frame.hpp>
#endif

#include "gpumemprof/history/unwind_cache.hpp"

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
GPUMEMPROF_NOINLINE inline std::size_t unwind_slow(std::uintptr_t* out, std::size_t max_frames,
                                                   std::size_t skip = 0) noexcept {
#if GPUMEMPROF_WITH_STACKTRACE
  struct State {
    std::uintptr_t* out;
    std::size_t count;
    std::size_t max;
    std::size_t skip;
  } state{out, 0, max_frames, skip + 1};  // +1: this function's own frame
  if (max_frames == 0) return 0;
  _Unwind_Backtrace(
      [](_Unwind_Context* ctx, void* arg) {
        auto& s = *static_cast<State*>(arg);
        const std::uintptr_t ip = _Unwind_GetIP(ctx);
        if (ip == 0) return _URC_END_OF_STACK;
        if (s.skip > 0) {
          --s.skip;
          return _URC_NO_REASON;
        }
        s.out[s.count++] = ip;
        return s.count == s.max ? _URC_END_OF_STACK : _URC_NO_REASON;
      },
      &state);
  return state.count;
#else
  (void)out;
  (void)max_frames;
  (void)skip;
  return 0;
#endif
}

}  // namespace detail

/// Fills `out` with up to `max_frames` return addresses of the calling thread, innermost first,
/// starting `skip` frames above the caller of capture_stack. Returns how many it wrote: 0 when
/// built without stack traces. No heap allocation once warmed up; safe on any thread.
GPUMEMPROF_NOINLINE inline std::size_t capture_stack(std::uintptr_t* out, std::size_t max_frames,
                                                     std::size_t skip = 0) noexcept {
#if GPUMEMPROF_UNWIND_CACHE
  // Known call paths walk through cached frame rules (unwind_cache.hpp); the rest go to libgcc.
  if (max_frames == 0) return 0;
  if (detail::UnwindCache* cache = detail::UnwindCache::local(); cache != nullptr) {
    const std::size_t n = cache->capture(out, max_frames, skip + 1);
    if (n != detail::UnwindCache::give_up) return n;
  }
#endif
  std::size_t n = detail::unwind_slow(out, max_frames, skip + 1);
  asm volatile("" : "+r"(n));  // no tail call: this frame must exist while the callee skips it
  return n;
}

/// Turns return addresses into frames, caching each address's frame forever. Thread-safe.
class Symbolizer {
 public:
  static Symbolizer& instance() {
    static auto* s = new Symbolizer();  // never destroyed: snapshots may be built during exit
    return *s;
  }

  /// The frame of a return address: function, source file and line of the call. The reference
  /// stays valid for the life of the process.
  const Frame& frame(std::uintptr_t return_address) {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(return_address);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(return_address, resolve(return_address)).first->second;
  }

  /// True for frames of gpumemprof itself (the allocator, the recorder): snapshots start at the
  /// first frame outside the library, like PyTorch's stacks start in user code.
  static bool is_internal(const Frame& f) {
    std::string_view name = f.name;
    // A function template's demangled name starts with its return type: skip to the function.
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i < name.size(); ++i) {
      const char c = name[i];
      if (c == '<')
        ++depth;
      else if (c == '>')
        --depth;
      else if (c == '(' && depth == 0)
        break;
      else if (c == ' ' && depth == 0)
        start = i + 1;
    }
    return name.substr(start).starts_with("gpumemprof::");
  }

 private:
  Symbolizer() = default;

  static Frame resolve(std::uintptr_t return_address) {
    Frame f;
#if GPUMEMPROF_WITH_STACKTRACE
    // A return address points after the call; the call itself is one byte earlier.
    const boost::stacktrace::frame bf(reinterpret_cast<const void*>(return_address - 1));
    f.name = bf.name();
    f.filename = bf.source_file();
    f.line = static_cast<std::int64_t>(bf.source_line());
    if (f.filename.empty()) {  // no debug info: name the binary, like PyTorch's "??" frames
      Dl_info info{};
      if (dladdr(reinterpret_cast<const void*>(return_address - 1), &info) != 0 && info.dli_fname != nullptr) {
        f.filename = info.dli_fname;
      }
    }
#endif
    if (f.filename.empty()) f.filename = "??";
    if (f.name.empty()) {
      char hex[2 + 16 + 1];
      std::snprintf(hex, sizeof hex, "0x%zx", static_cast<std::size_t>(return_address));
      f.name = hex;
    }
    return f;
  }

  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Frame> cache_;
};

namespace detail {

/// The stack of an allocation outside the allocator as "function at file:line" frames (without
/// line tables, "function in binary"), from the first frame outside gpumemprof up to main
/// (device/external_memory.hpp calls it through its hook).
inline std::vector<std::string> symbolize_external_frames(const std::uintptr_t* frames, std::size_t count) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    const Frame& f = Symbolizer::instance().frame(frames[i]);
    if (out.empty() && Symbolizer::is_internal(f)) continue;
    out.push_back(frame_label(f));
    if (f.name == "main") break;  // the C library's frames below main say nothing
  }
  return out;
}

/// Installs the symbolizer above in every program that includes this header (with stacks built in).
inline const bool external_frames_symbolized = [] {
  if constexpr (stacks_available) external_stack_symbolizer.store(&symbolize_external_frames, std::memory_order_release);
  return stacks_available;
}();

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
