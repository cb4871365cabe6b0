// Layer 3: capture of C++ stacks (the unwind cache, libgcc's unwinder) and their symbolization
// through Boost.Stacktrace (function, file, line).
// Included by stacks.hpp in header-only mode; compiled once in the library (lib/stacks.cpp)
// for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/external_memory.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/history/unwind_cache.hpp"

#if GPUMEMPROF_WITH_STACKTRACE
#include <dlfcn.h>
#include <unwind.h>

#include <boost/stacktrace/frame.hpp>
#endif

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC std::size_t unwind_slow(std::uintptr_t* out, std::size_t max_frames,
                                                            std::size_t skip) noexcept {
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

GPUMEMPROF_NOINLINE GPUMEMPROF_FUNC std::size_t capture_stack(std::uintptr_t* out, std::size_t max_frames,
                                                              std::size_t skip) noexcept {
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

GPUMEMPROF_FUNC Symbolizer& Symbolizer::instance() {
  static auto* s = new Symbolizer();  // never destroyed: snapshots may be built during exit
  return *s;
}

GPUMEMPROF_FUNC const Frame& Symbolizer::frame(std::uintptr_t return_address) {
  std::lock_guard lock(mutex_);
  auto it = cache_.find(return_address);
  if (it != cache_.end()) return it->second;
  return cache_.emplace(return_address, resolve(return_address)).first->second;
}

GPUMEMPROF_FUNC bool Symbolizer::is_internal(const Frame& f) {
  // The PyTorch bridge's library (python/gpumemprof_torch.cpp and python_frames.cpp; the binary
  // libgpumemprof_torch.so without line tables) is gpumemprof's too.
  const std::string_view file = f.filename;
  if (file.ends_with("gpumemprof_torch.cpp") || file.ends_with("python/python_frames.cpp") ||
      file.ends_with("libgpumemprof_torch.so")) {
    return true;
  }
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

GPUMEMPROF_FUNC Frame Symbolizer::resolve(std::uintptr_t return_address) {
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

namespace detail {

GPUMEMPROF_FUNC std::vector<std::string> symbolize_external_frames(const std::uintptr_t* frames, std::size_t count) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    const Frame& f = Symbolizer::instance().frame(frames[i]);
    if (out.empty() && Symbolizer::is_internal(f)) continue;
    out.push_back(frame_label(f));
    if (f.name == "main") break;  // the C library's frames below main say nothing
  }
  return out;
}

/// Installs the symbolizer above in every program that includes this header (with stacks built in;
/// with the compiled library, when the library loads).
GPUMEMPROF_FUNC const bool external_frames_symbolized = [] {
  if constexpr (stacks_available)
    external_stack_symbolizer.store(&symbolize_external_frames, std::memory_order_release);
  return stacks_available;
}();

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
