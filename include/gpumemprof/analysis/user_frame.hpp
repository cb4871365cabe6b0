// Analysis layer: the user's frame of a stack -- the one line a report names for an allocation.
// One rule for every report: the innermost frame that is not internal, where internal means
// gpumemprof itself, PyTorch's own Python modules, the C++ runtime and system headers and
// libraries, Boost, and frames with no file ("??"). When every frame is internal: the innermost
// frame outside gpumemprof, else the innermost frame.
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// True when the function a demangled name denotes is in namespace gpumemprof. A function
/// template's name starts with its return type ("std::vector<int> gpumemprof::f(...)"), so the
/// function is the last space-separated word before the parameter list, outside template brackets.
[[nodiscard]] inline bool names_gpumemprof_function(std::string_view name) {
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') {
      ++depth;
    } else if (c == '>') {
      --depth;
    } else if (c == '(' && depth == 0) {
      break;
    } else if (c == ' ' && depth == 0) {
      start = i + 1;
    }
  }
  return name.substr(start).starts_with("gpumemprof::");
}

/// True for frames of gpumemprof itself (its headers, or a function in namespace gpumemprof).
[[nodiscard]] inline bool is_gpumemprof_frame(const Frame& f) {
  return f.filename.find("include/gpumemprof/") != std::string::npos || names_gpumemprof_function(f.name);
}

/// True for frames a user does not edit to change an allocation (see the file comment).
[[nodiscard]] inline bool is_internal_frame(const Frame& f) {
  const std::string& p = f.filename;
  return is_gpumemprof_frame(f) || p.empty() || p == "??" || p.find("site-packages/torch/") != std::string::npos ||
         p.find("/c++/") != std::string::npos || p.find("boost/") != std::string::npos ||
         p.starts_with("/usr/include/") || p.starts_with("/usr/lib");
}

/// The user's frame of `frames` (innermost first); nullptr when there are no frames.
[[nodiscard]] inline const Frame* user_frame(const Frames& frames) {
  if (!frames || frames->empty()) return nullptr;
  const Frame* outside = nullptr;
  for (const Frame& f : *frames) {
    if (!is_internal_frame(f)) return &f;
    if (outside == nullptr && !is_gpumemprof_frame(f)) outside = &f;
  }
  return outside != nullptr ? outside : &frames->front();
}

/// "name at file:line" of the user's frame, or "(no stack recorded)".
[[nodiscard]] inline std::string user_frame_label(const Frames& frames) {
  const Frame* f = user_frame(frames);
  return f == nullptr ? std::string("(no stack recorded)") : frame_label(*f);
}

GPUMEMPROF_NAMESPACE_END
