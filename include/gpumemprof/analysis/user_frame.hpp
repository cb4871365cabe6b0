// Analysis layer: the user's frame of a stack -- the one line a report names for an allocation.
// One rule for every report: the innermost frame that is neither internal nor in an installed
// package. Internal means gpumemprof itself (with the PyTorch bridge's library and package),
// PyTorch's own Python modules, libraries and C++ namespaces (torch, c10, libtorch), the Python
// interpreter and its standard library, the C++ runtime and system headers and libraries, Boost,
// and frames with no file ("??"). An installed package (site-packages, dist-packages: transformers,
// torchvision) is code the user runs but does not edit: the label names the user's line and, in
// brackets, the package's line that allocated ("step at train.py:57 (in forward at
// .../transformers/activations.py:66)"). C++ and Python frames (python_frames.hpp) follow the same
// rule, so a bridge's top site reads like "forward at model.py:42". With no user's frame: the
// package's frame, else the innermost frame outside gpumemprof, else the innermost frame.
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// True when the function a demangled name denotes is in namespace gpumemprof. A function
/// template's name starts with its return type ("std::vector<int> gpumemprof::f(...)"), so the
/// function is the last space-separated word before the parameter list, outside template brackets.
[[nodiscard]] bool names_gpumemprof_function(std::string_view name);

/// True for frames of gpumemprof itself (its headers, or a function in namespace gpumemprof).
[[nodiscard]] bool is_gpumemprof_frame(const Frame& f);

/// True for frames a user does not edit to change an allocation (see the file comment).
[[nodiscard]] bool is_internal_frame(const Frame& f);

/// The user's frame of `frames` (innermost first); nullptr when there are no frames.
[[nodiscard]] const Frame* user_frame(const Frames& frames);

/// The innermost frame that is not internal when it is in an installed package (the library
/// line that allocated on the user's behalf); nullptr otherwise.
[[nodiscard]] const Frame* package_frame(const Frames& frames);

/// "name at file:line" of the user's frame, then " (in name at file:line)" of the package frame
/// inside it when there is one; or "(no stack recorded)".
[[nodiscard]] std::string user_frame_label(const Frames& frames);

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/analysis.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/analysis/user_frame-inl.hpp"
#endif
