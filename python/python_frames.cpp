// The PyTorch bridge's Python frames: the hooks of gpumemprof/history/python_frames.hpp over the
// interpreter this library is loaded into, found at run time (the library links no libpython).
//
// Capture, at the entry of an allocator call: a thread that has a Python thread state -- the
// thread that called into torch, which released the GIL in torch's binding -- takes the GIL (a
// thread holding it already keeps it), walks its frames and writes each as its code object and
// bytecode offset; no string, no line lookup. Each code object seen is kept alive (one reference,
// for the life of the process), so its address stays its identity until resolution. Threads that
// never ran Python (no thread state: CUDA's, NCCL's) are not touched and get no frames; autograd's
// threads, whose thread states run no Python code, get none either (PyTorch's stacks="python" gives
// them none). Resolution, when a snapshot is built: file, line and function from the code object
// under the GIL, as PyTorch's CapturedTraceback symbolizes its Python frames.
#include "python_frames.h"

#include <dlfcn.h>

#include <atomic>

#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "gpumemprof/history/python_frames.hpp"

namespace gmp = gpumemprof;

namespace {

using PyObj = void;  // PyObject*, PyFrameObject*, PyCodeObject*, PyThreadState*: opaque here

// The interpreter's C API entry points this file uses (all public since Python 3.9 except
// PyFrame_GetLasti, 3.11; without it the line is taken at capture).
struct PythonApi {
  int (*is_initialized)() = nullptr;                  // Py_IsInitialized
  int (*is_finalizing)() = nullptr;                   // Py_IsFinalizing / _Py_IsFinalizing (optional)
  PyObj* (*this_thread_state)() = nullptr;            // PyGILState_GetThisThreadState
  int (*gil_ensure)() = nullptr;                      // PyGILState_Ensure
  void (*gil_release)(int) = nullptr;                 // PyGILState_Release
  PyObj* (*thread_state_get)() = nullptr;             // PyThreadState_Get
  PyObj* (*thread_state_frame)(PyObj*) = nullptr;     // PyThreadState_GetFrame (new reference)
  PyObj* (*frame_code)(PyObj*) = nullptr;             // PyFrame_GetCode (new reference)
  PyObj* (*frame_back)(PyObj*) = nullptr;             // PyFrame_GetBack (new reference)
  int (*frame_lasti)(PyObj*) = nullptr;               // PyFrame_GetLasti (optional)
  int (*frame_line)(PyObj*) = nullptr;                // PyFrame_GetLineNumber
  int (*code_line)(PyObj*, int) = nullptr;            // PyCode_Addr2Line
  void (*decref)(PyObj*) = nullptr;                   // Py_DecRef
  PyObj* (*get_attr)(PyObj*, const char*) = nullptr;  // PyObject_GetAttrString (new reference)
  const char* (*utf8)(PyObj*) = nullptr;              // PyUnicode_AsUTF8
  void (*clear_error)() = nullptr;                    // PyErr_Clear
  bool ok = false;

  PythonApi() {
    const auto sym = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
    const auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym(name));
      return fn != nullptr;
    };
    ok = get(is_initialized, "Py_IsInitialized") && get(this_thread_state, "PyGILState_GetThisThreadState") &&
         get(gil_ensure, "PyGILState_Ensure") && get(gil_release, "PyGILState_Release") &&
         get(thread_state_get, "PyThreadState_Get") && get(thread_state_frame, "PyThreadState_GetFrame") &&
         get(frame_code, "PyFrame_GetCode") && get(frame_back, "PyFrame_GetBack") &&
         get(frame_line, "PyFrame_GetLineNumber") && get(code_line, "PyCode_Addr2Line") && get(decref, "Py_DecRef") &&
         get(get_attr, "PyObject_GetAttrString") && get(utf8, "PyUnicode_AsUTF8") && get(clear_error, "PyErr_Clear");
    (void)(get(is_finalizing, "Py_IsFinalizing") || get(is_finalizing, "_Py_IsFinalizing"));
    (void)get(frame_lasti, "PyFrame_GetLasti");
  }

  /// True when the interpreter can run code on this thread now.
  [[nodiscard]] bool alive() const {
    return ok && is_initialized() != 0 && (is_finalizing == nullptr || is_finalizing() == 0);
  }
};

const PythonApi& api() {
  static const auto* a = new PythonApi();  // never destroyed: frees can come during exit
  return *a;
}

// Code objects kept alive (one reference each); touched only with the GIL held.
std::unordered_set<PyObj*>& kept_code() {
  static auto* set = new std::unordered_set<PyObj*>();
  return *set;
}

// A direct-mapped cache in front of kept_code() (GIL held): a code object kept is never freed, so
// an address found here is that object. One load and compare per frame in the common case.
constexpr std::size_t kSeenSlots = 4096;
PyObj* seen_code[kSeenSlots];

// Keeps `code` (a new reference) alive for good, dropping the reference when it is kept already.
void keep(const PythonApi& py, PyObj* code) {
  PyObj*& slot = seen_code[(reinterpret_cast<std::uintptr_t>(code) >> 4) & (kSeenSlots - 1)];
  if (slot == code || !kept_code().insert(code).second) {
    py.decref(code);  // kept already: one reference is enough
  }
  slot = code;
}

// The thread whose Python frames stand in for a thread that runs none (gpumemprof_torch_set_
// waiting_thread), or nullptr: autograd's threads run backward while that thread waits in it.
std::atomic<PyObj*> waiting_thread{nullptr};

// Writes the frames of `frame` and its callers (consumes the reference); the GIL is held.
std::size_t walk(const PythonApi& py, PyObj* frame, std::uintptr_t* out, std::size_t capacity) {
  std::size_t n = 0;
  try {
    while (frame != nullptr && n + 2 <= capacity) {
      PyObj* code = py.frame_code(frame);
      if (code != nullptr) {
        keep(py, code);
        out[n++] = gmp::detail::kPythonFrameTag | reinterpret_cast<std::uintptr_t>(code);
        out[n++] = py.frame_lasti != nullptr
                       ? gmp::detail::python_position(static_cast<std::uintptr_t>(py.frame_lasti(frame)), false)
                       : gmp::detail::python_position(static_cast<std::uintptr_t>(py.frame_line(frame)), true);
      }
      PyObj* back = py.frame_back(frame);
      py.decref(frame);
      frame = back;
    }
    if (frame != nullptr) py.decref(frame);
  } catch (...) {  // out of memory in the set: the frames so far
    if (frame != nullptr) py.decref(frame);
  }
  return n;
}

std::size_t capture(std::uintptr_t* out, std::size_t capacity) noexcept {
  const PythonApi& py = api();
  // No thread state: this thread never ran Python, and PyGILState_Ensure would create one.
  if (!py.ok || !py.alive() || py.this_thread_state() == nullptr) return 0;
  const int gil = py.gil_ensure();
  PyObj* self = py.thread_state_get();
  std::size_t n = walk(py, py.thread_state_frame(self), out, capacity);
  if (n == 0) {
    PyObj* waiting = waiting_thread.load(std::memory_order_acquire);
    if (waiting != nullptr && waiting != self) n = walk(py, py.thread_state_frame(waiting), out, capacity);
  }
  py.gil_release(gil);
  return n;
}

std::string text_attr(const PythonApi& py, PyObj* code, const char* name) {
  std::string out;
  if (PyObj* v = py.get_attr(code, name)) {
    if (const char* s = py.utf8(v)) out = s;
    py.decref(v);
  }
  if (out.empty()) py.clear_error();
  return out;
}

bool resolve(std::uintptr_t code_word, std::uintptr_t position, gmp::Frame& out) {
  const PythonApi& py = api();
  if (!py.alive()) return false;
  const int gil = py.gil_ensure();
  auto* code = reinterpret_cast<PyObj*>(code_word);
  out.filename = text_attr(py, code, "co_filename");
  out.name = text_attr(py, code, "co_name");
  const auto value = gmp::detail::position_value(position);
  out.line = gmp::detail::position_is_line(position) ? static_cast<std::int64_t>(value)
                                                     : py.code_line(code, static_cast<int>(value));
  py.gil_release(gil);
  if (out.filename.empty()) out.filename = "??";
  return true;
}

const gmp::detail::PythonFrameHooks kHooks{&capture, &resolve};

}  // namespace

std::vector<gmp::Frame> gpumemprof_torch_python_stack() {
  std::vector<std::uintptr_t> raw(2 * gmp::detail::kMaxPythonFrames);
  raw.resize(capture(raw.data(), raw.size()));
  std::vector<gmp::Frame> out;
  for (std::size_t i = 0; i + 1 < raw.size(); i += 2) {
    gmp::Frame f;
    if (!resolve(raw[i] & ~gmp::detail::kPythonFrameTag, raw[i + 1], f)) break;
    out.push_back(std::move(f));
  }
  return out;
}

bool gpumemprof_torch_set_waiting_thread(bool on) {
  const PythonApi& py = api();
  if (!py.ok || !py.alive()) return false;
  waiting_thread.store(on ? py.this_thread_state() : nullptr, std::memory_order_release);
  return true;
}

bool gpumemprof_torch_install_python_frames() {
  if (!api().ok) return false;
  gmp::detail::set_python_frame_hooks(&kHooks);
  return true;
}
