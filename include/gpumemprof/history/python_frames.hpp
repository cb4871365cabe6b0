// Layer 3: Python frames in the stack table. The history layer knows no Python; a host that
// embeds an interpreter (the PyTorch bridge, python/gpumemprof_torch.cpp) installs two hooks:
// one captures the calling thread's Python frames as raw words, cheaply, at the entry of an
// allocator call; the other turns such words into file, line and function when a snapshot is
// built. Raw Python frames travel in the same StackTable (stack_table.hpp) as C++ return
// addresses, after them:
//
//   [C++ return addresses ...] [tag | code object, position] [tag | code object, position] ...
//
// innermost first within each part. A Python frame is two words: the address of its code object
// with kPythonFrameTag set (user-space addresses never have bit 63 set, so no return address
// looks like one), then its position (python_position: the bytecode offset, resolved to a line
// later, or the line itself). FrameResolver (frame_resolver.hpp) resolves both kinds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Bit 63 marks the first word of a Python frame in a raw stack.
inline constexpr std::uintptr_t kPythonFrameTag = std::uintptr_t{1} << 63;
/// Python frames one capture keeps (the innermost ones).
inline constexpr std::size_t kMaxPythonFrames = 128;

/// A Python frame's position word: a bytecode offset (resolved to a line at snapshot time) or,
/// where the interpreter offers no offset, the line itself.
[[nodiscard]] constexpr std::uintptr_t python_position(std::uintptr_t value, bool is_line) noexcept {
  return (value << 1) | (is_line ? 1u : 0u);
}
[[nodiscard]] constexpr bool position_is_line(std::uintptr_t position) noexcept { return (position & 1u) != 0; }
[[nodiscard]] constexpr std::uintptr_t position_value(std::uintptr_t position) noexcept { return position >> 1; }

[[nodiscard]] constexpr bool is_python_word(std::uintptr_t word) noexcept { return (word & kPythonFrameTag) != 0; }

struct PythonFrameHooks {
  /// Writes the calling thread's Python frames, innermost first, two words each, into
  /// out[0..capacity); returns the words written (0 when the thread runs no Python code). Runs
  /// with no allocator lock held; never throws.
  std::size_t (*capture)(std::uintptr_t* out, std::size_t capacity) noexcept = nullptr;
  /// The frame of (code object, position) from a capture; false when it cannot tell (the
  /// interpreter is gone). Called when a snapshot is built, with no allocator lock held.
  bool (*resolve)(std::uintptr_t code, std::uintptr_t position, Frame& out) = nullptr;
};

/// The hooks in force (nullptr: none, as in a program without Python).
inline std::atomic<const PythonFrameHooks*> python_frame_hooks{nullptr};

/// Installs `hooks` (a static object; nullptr removes them). From then on, history whose
/// options ask for Python stacks captures them.
inline void set_python_frame_hooks(const PythonFrameHooks* hooks) noexcept {
  python_frame_hooks.store(hooks, std::memory_order_release);
}

/// A raw stack split into its C++ return addresses and its Python frames (word pairs).
struct SplitStack {
  std::span<const std::uintptr_t> cpp;
  std::span<const std::uintptr_t> python;  // even length: (tag | code, position) pairs
};

[[nodiscard]] inline SplitStack split_stack(std::span<const std::uintptr_t> raw) noexcept {
  std::size_t k = 0;
  while (k < raw.size() && !is_python_word(raw[k])) ++k;
  std::span<const std::uintptr_t> py = raw.subspan(k);
  if (py.size() % 2 != 0) py = py.first(py.size() - 1);  // a torn pair: never written so, but safe
  return {raw.first(k), py};
}

/// True for a C++ frame of the Python interpreter itself (its evaluation loop, calls, the
/// binary or libpython): with Python frames after them, a stack's C++ part ends there, as
/// PyTorch's combined stacks show the Python frames in the interpreter's place.
[[nodiscard]] inline bool is_interpreter_frame(const Frame& f) {
  const std::string_view file = f.filename;
  const std::size_t slash = file.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  if (file.find("libpython") != std::string_view::npos || (base.starts_with("python") && !base.ends_with(".py"))) {
    return true;
  }
  const std::string_view name = f.name;
  return name.starts_with("_PyEval_") || name.starts_with("PyEval_") || name.starts_with("_PyObject_") ||
         name.starts_with("PyObject_Call") || name.starts_with("_PyFunction_") || name.starts_with("cfunction_");
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
