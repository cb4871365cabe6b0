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
  const std::string& p = f.filename;
  // The headers, and the PyTorch bridge: its library (python/gpumemprof_torch.cpp, or the binary
  // libgpumemprof_torch.so without line tables) and its package's Python files.
  return p.find("include/gpumemprof/") != std::string::npos || p.find("gpumemprof_torch.") != std::string::npos ||
         p.find("gpumemprof_torch/") != std::string::npos || names_gpumemprof_function(f.name);
}

namespace detail {

/// The file name of a path (after its last '/').
inline std::string_view base_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

/// PyTorch's own code: its Python modules (site-packages or dist-packages), its libraries
/// (libtorch*, libc10*, the torch/lib folder) and functions in its C++ namespaces.
inline bool is_torch_frame(const Frame& f) {
  const std::string& p = f.filename;
  const std::string_view base = base_name(p);
  if (p.find("-packages/torch/") != std::string::npos || p.find("/torch/lib/") != std::string::npos ||
      p.find("/torch/csrc/") != std::string::npos || p.find("/c10/") != std::string::npos ||
      p.find("/aten/src/") != std::string::npos || base.starts_with("libtorch") || base.starts_with("libc10")) {
    return true;
  }
  const std::string_view n = f.name;
  return n.starts_with("at::") || n.starts_with("c10::") || n.starts_with("torch::") || n.starts_with("THP");
}

/// The Python interpreter and its standard library: the python binary, libpython, "<frozen ...>"
/// modules and lib/pythonX.Y/ outside site-packages and dist-packages.
inline bool is_python_runtime_frame(const Frame& f) {
  const std::string& p = f.filename;
  const std::string_view base = base_name(p);
  if (p.starts_with("<frozen ") || p.find("libpython") != std::string::npos ||
      (base.starts_with("python") && !base.ends_with(".py"))) {
    return true;
  }
  return p.find("/lib/python") != std::string::npos && p.find("-packages/") == std::string::npos;
}

/// An installed package other than PyTorch (site-packages or dist-packages): a model library such
/// as transformers or torchvision, which a user runs but does not edit.
inline bool is_package_frame(const Frame& f) {
  const std::string& p = f.filename;
  return p.find("site-packages/") != std::string::npos || p.find("dist-packages/") != std::string::npos;
}

}  // namespace detail

GPUMEMPROF_FUNC bool is_internal_frame(const Frame& f) {
  const std::string& p = f.filename;
  return is_gpumemprof_frame(f) || p.empty() || p == "??" || detail::is_torch_frame(f) ||
         detail::is_python_runtime_frame(f) || p.find("/c++/") != std::string::npos ||
         p.find("boost/") != std::string::npos || p.starts_with("/usr/include/") || p.starts_with("/usr/lib") ||
         p.starts_with("/lib/");
}

GPUMEMPROF_FUNC const Frame* package_frame(const Frames& frames) {
  if (!frames) return nullptr;
  for (const Frame& f : *frames) {
    if (!is_internal_frame(f)) return detail::is_package_frame(f) ? &f : nullptr;
  }
  return nullptr;
}

GPUMEMPROF_FUNC const Frame* user_frame(const Frames& frames) {
  if (!frames || frames->empty()) return nullptr;
  const Frame* outside = nullptr;
  for (const Frame& f : *frames) {
    if (!is_internal_frame(f) && !detail::is_package_frame(f)) return &f;
    if (outside == nullptr && !is_gpumemprof_frame(f)) outside = &f;
  }
  const Frame* package = package_frame(frames);
  return package != nullptr ? package : outside != nullptr ? outside : &frames->front();
}

GPUMEMPROF_FUNC std::string user_frame_label(const Frames& frames) {
  const Frame* f = user_frame(frames);
  if (f == nullptr) return "(no stack recorded)";
  const Frame* package = package_frame(frames);
  return package == nullptr || package == f ? frame_label(*f) : frame_label(*f) + " (in " + frame_label(*package) + ")";
}

GPUMEMPROF_NAMESPACE_END
