// Layer 3: symbolization of captured stacks through Boost.Stacktrace (function, file, line).
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
#include "gpumemprof/history/stacks.hpp"

#if GPUMEMPROF_WITH_STACKTRACE
#include <dlfcn.h>

#include <boost/stacktrace/frame.hpp>
#endif

GPUMEMPROF_NAMESPACE_BEGIN

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
  if constexpr (stacks_available) external_stack_symbolizer.store(&symbolize_external_frames, std::memory_order_release);
  return stacks_available;
}();

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
