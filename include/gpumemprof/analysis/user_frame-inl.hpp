// Analysis layer: the user's-frame rule's bodies (user_frame.hpp declares them and states the
// rule). Included by that header in header-only mode; compiled once in the library
// (lib/analysis.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC bool names_gpumemprof_function(std::string_view name) {
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

GPUMEMPROF_FUNC bool is_gpumemprof_frame(const Frame& f) {
  return f.filename.find("include/gpumemprof/") != std::string::npos || names_gpumemprof_function(f.name);
}

GPUMEMPROF_FUNC bool is_internal_frame(const Frame& f) {
  const std::string& p = f.filename;
  return is_gpumemprof_frame(f) || p.empty() || p == "??" || p.find("site-packages/torch/") != std::string::npos ||
         p.find("/c++/") != std::string::npos || p.find("boost/") != std::string::npos ||
         p.starts_with("/usr/include/") || p.starts_with("/usr/lib");
}

GPUMEMPROF_FUNC const Frame* user_frame(const Frames& frames) {
  if (!frames || frames->empty()) return nullptr;
  const Frame* outside = nullptr;
  for (const Frame& f : *frames) {
    if (!is_internal_frame(f)) return &f;
    if (outside == nullptr && !is_gpumemprof_frame(f)) outside = &f;
  }
  return outside != nullptr ? outside : &frames->front();
}

GPUMEMPROF_FUNC std::string user_frame_label(const Frames& frames) {
  const Frame* f = user_frame(frames);
  return f == nullptr ? std::string("(no stack recorded)") : frame_label(*f);
}

GPUMEMPROF_NAMESPACE_END
