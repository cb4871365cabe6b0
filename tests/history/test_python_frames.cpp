// Python frames in allocation history (python_frames.hpp), with stand-in hooks for the
// interpreter: what each `stacks` mode captures, that Python frames travel in the stack table
// beside C++ frames and resolve into PyTorch's frame format in snapshots, that threads without
// Python frames get none, and the user-frame rule over such stacks.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/user_frame.hpp"
#include "gpumemprof/history/frame_resolver.hpp"
#include "gpumemprof/history/python_frames.hpp"
#include "history_util.hpp"

namespace gd = gmp::detail;
using gmp::HistoryStacks;

namespace {

// The stand-in interpreter: "code objects" are indexes into kCode; the calling thread's Python
// stack is thread_stack (innermost first, (code, bytecode offset)); a bytecode offset resolves
// to line offset / 2 + first line.
struct FakeCode {
  const char* file;
  const char* function;
  int first_line;
};
const FakeCode kCode[] = {
    {"/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", "forward", 100},
    {"/home/me/model.py", "forward", 40},
    {"/home/me/train.py", "<module>", 1},
};
thread_local std::vector<std::pair<int, int>> thread_stack;
int captures = 0;

std::uintptr_t code_word(int index) { return reinterpret_cast<std::uintptr_t>(&kCode[index]); }

std::size_t fake_capture(std::uintptr_t* out, std::size_t capacity) noexcept {
  ++captures;
  std::size_t n = 0;
  for (const auto& [code, offset] : thread_stack) {
    if (n + 2 > capacity) break;
    out[n++] = gd::kPythonFrameTag | code_word(code);
    out[n++] = gd::python_position(static_cast<std::uintptr_t>(offset), false);
  }
  return n;
}

bool fake_resolve(std::uintptr_t code, std::uintptr_t position, gmp::Frame& out) {
  const auto* c = reinterpret_cast<const FakeCode*>(code);
  out.filename = c->file;
  out.name = c->function;
  const auto value = static_cast<std::int64_t>(gd::position_value(position));
  out.line = gd::position_is_line(position) ? value : c->first_line + value / 2;
  return true;
}

const gd::PythonFrameHooks kHooks{&fake_capture, &fake_resolve};

/// Installs the stand-in hooks for one test, and a Python stack for this thread.
struct WithHooks {
  WithHooks() {
    gd::set_python_frame_hooks(&kHooks);
    // train.py:3 calls model.py:42 (forward), which calls torch's linear.py:105.
    thread_stack = {{0, 10}, {1, 4}, {2, 4}};
  }
  ~WithHooks() {
    gd::set_python_frame_hooks(nullptr);
    thread_stack.clear();
  }
};

bool has_file(const gmp::Frames& frames, const std::string& suffix) {
  if (frames == nullptr) return false;
  for (const auto& f : *frames) {
    if (f.filename.ends_with(suffix)) return true;
  }
  return false;
}

gmp::Frames frames_of_alloc(HistoryStacks stacks) {
  Recorded r({.stacks = stacks});
  void* p = r.a().allocate(4096);
  r.a().validate();
  const auto allocs = only(r.recorder.trace(), gmp::TraceAction::alloc);
  r.a().deallocate(p);
  REQUIRE(allocs.size() == 1);
  return allocs[0].frames;
}

}  // namespace

TEST_CASE("Python frames: stacks=python records the thread's Python frames only, file, line and function") {
  WithHooks hooks;
  const gmp::Frames f = frames_of_alloc(HistoryStacks::python);
  REQUIRE(f != nullptr);
  REQUIRE(f->size() == 3);  // no C++ frame
  CHECK((*f)[0] == gmp::Frame{"/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 105, "forward"});
  CHECK((*f)[1] == gmp::Frame{"/home/me/model.py", 42, "forward"});
  CHECK((*f)[2] == gmp::Frame{"/home/me/train.py", 3, "<module>"});
  // The user's frame skips torch's module: the line a report names.
  CHECK(gmp::user_frame_label(f) == "forward at /home/me/model.py:42");
}

TEST_CASE("Python frames: stacks=all records C++ frames first, then the Python frames") {
  WithHooks hooks;
  const gmp::Frames f = frames_of_alloc(HistoryStacks::all);
  REQUIRE(f != nullptr);
  REQUIRE(f->size() >= 3);
  const std::size_t n = f->size();
  CHECK((*f)[n - 3].filename.ends_with("linear.py"));
  CHECK((*f)[n - 1] == gmp::Frame{"/home/me/train.py", 3, "<module>"});
  if (gmp::stacks_available) {
    CHECK(n > 3);
    CHECK(has_file(f, "test_python_frames.cpp"));  // the C++ caller, innermost
    CHECK((*f)[0].filename.ends_with("test_python_frames.cpp"));
  }
}

TEST_CASE("Python frames: stacks=cpp never asks the interpreter") {
  WithHooks hooks;
  captures = 0;
  const gmp::Frames f = frames_of_alloc(HistoryStacks::cpp);
  CHECK(captures == 0);
  CHECK_FALSE(has_file(f, "model.py"));
  if (gmp::stacks_available) CHECK(has_file(f, "test_python_frames.cpp"));
}

TEST_CASE("Python frames: without hooks, stacks=python and all mean C++ frames (a program without Python)") {
  gd::set_python_frame_hooks(nullptr);
  for (const HistoryStacks s : {HistoryStacks::python, HistoryStacks::all}) {
    const gmp::Frames f = frames_of_alloc(s);
    if (gmp::stacks_available) {
      CHECK(has_file(f, "test_python_frames.cpp"));
    } else {
      CHECK(f == nullptr);
    }
  }
}

TEST_CASE("Python frames: a thread running no Python code gets none with stacks=python (autograd's threads)") {
  WithHooks hooks;
  Recorded r({.stacks = HistoryStacks::python});
  void* p = nullptr;
  std::thread([&] { p = r.a().allocate(4096); }).join();  // its thread_stack is empty
  void* q = r.a().allocate(4096);
  const auto allocs = only(r.recorder.trace(), gmp::TraceAction::alloc);
  r.a().deallocate(p);
  r.a().deallocate(q);
  r.a().validate();
  REQUIRE(allocs.size() == 2);
  CHECK(allocs[0].frames == nullptr);
  CHECK(has_file(allocs[1].frames, "model.py"));
  CHECK(gmp::user_frame_label(allocs[0].frames) == "(no stack recorded)");
}

TEST_CASE("Python frames share the stack table with C++ frames: one id per distinct mixed stack") {
  gd::StackTable table;
  const std::uintptr_t cpp = 0x401000;
  const std::uintptr_t a[] = {cpp, gd::kPythonFrameTag | code_word(1), gd::python_position(4, false)};
  const std::uintptr_t b[] = {cpp, gd::kPythonFrameTag | code_word(1), gd::python_position(6, false)};
  const std::uint32_t ia = table.intern(a, 3);
  CHECK(table.intern(a, 3) == ia);
  CHECK(table.intern(b, 3) != ia);
  const gd::SplitStack split = gd::split_stack(table.frames(ia));
  CHECK(split.cpp.size() == 1);
  CHECK(split.python.size() == 2);
  // Positions that are lines (an interpreter without bytecode offsets) resolve as they are.
  gd::set_python_frame_hooks(&kHooks);
  const std::uintptr_t c[] = {gd::kPythonFrameTag | code_word(2), gd::python_position(77, true)};
  gd::FrameResolver resolve(table, 16);
  const gmp::Frames fc = resolve(table.intern(c, 2));
  gd::set_python_frame_hooks(nullptr);
  REQUIRE(fc != nullptr);
  REQUIRE(fc->size() == 1);
  CHECK(fc->front() == gmp::Frame{"/home/me/train.py", 77, "<module>"});
  // Without hooks at snapshot time a Python frame still shows, as PyTorch's unknown frames do.
  gd::FrameResolver bare(table, 16);
  const gmp::Frames fb = bare(table.intern(c, 2));
  REQUIRE(fb != nullptr);
  CHECK(fb->front() == gmp::Frame{"??", 77, "<python frame>"});
}

TEST_CASE("Python frames: the interpreter's C++ frames give way to the Python frames") {
  CHECK(gd::is_interpreter_frame({"/usr/bin/python3.11", 0, "_PyEval_EvalFrameDefault"}));
  CHECK(gd::is_interpreter_frame({"/opt/conda/lib/libpython3.11.so.1.0", 0, "0x7f00"}));
  CHECK(gd::is_interpreter_frame({"Objects/call.c", 12, "_PyObject_MakeTpCall"}));
  CHECK_FALSE(gd::is_interpreter_frame({"/home/me/python_train.py", 3, "main"}));
  CHECK_FALSE(gd::is_interpreter_frame({"/x/site-packages/torch/lib/libtorch_python.so", 0, "THPVariable_add"}));
}

TEST_CASE("user frames: torch, c10, libtorch, the bridge and the Python runtime are internal") {
  using gmp::Frame;
  const auto internal = [](const Frame& f) { return gmp::is_internal_frame(f); };
  CHECK(internal({"/usr/local/lib/python3.11/dist-packages/torch/nn/modules/module.py", 1750, "_call_impl"}));
  CHECK(internal({"/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", 0, "0x1234"}));
  CHECK(internal({"/x/torch/lib/libc10_cuda.so", 0, "c10::cuda::CUDACachingAllocator::raw_alloc(unsigned long)"}));
  CHECK(internal({"aten/src/ATen/native/TensorFactories.cpp", 200, "at::native::empty_cuda"}));
  CHECK(internal({"??", 0, "at::_ops::empty_memory_format::call"}));
  CHECK(internal({"/src/gpumemprof/python/gpumemprof_torch.cpp", 115, "gpumemprof_malloc"}));
  CHECK(internal({"/x/site-packages/gpumemprof_torch/libgpumemprof_torch.so", 0, "gpumemprof_malloc"}));
  CHECK(internal({"/src/gpumemprof/python/gpumemprof_torch/run.py", 90, "main"}));
  CHECK(internal({"<frozen runpy>", 88, "_run_code"}));
  CHECK(internal({"/usr/lib/python3.11/runpy.py", 88, "_run_code"}));
  CHECK(internal({"/opt/conda/lib/python3.11/contextlib.py", 81, "inner"}));
  CHECK(internal({"/usr/bin/python3.11", 0, "_PyEval_EvalFrameDefault"}));
  CHECK_FALSE(internal({"/home/me/model.py", 42, "forward"}));
  CHECK_FALSE(internal({"/home/me/python_train.py", 3, "<module>"}));
  CHECK_FALSE(
      internal({"/opt/conda/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py", 300, "forward"}));
  // A mixed stack as the bridge records it with stacks="all": torch's C++ and Python, then the user's.
  const gmp::Frames stack = std::make_shared<const std::vector<Frame>>(
      std::vector<Frame>{{"/x/site-packages/gpumemprof_torch/libgpumemprof_torch.so", 0, "gpumemprof_malloc"},
                         {"/x/site-packages/torch/lib/libc10_cuda.so", 0, "c10::cuda::CUDAPluggableAllocator::malloc"},
                         {"/x/site-packages/torch/lib/libtorch_cpu.so", 0, "at::_ops::mm::call"},
                         {"/x/site-packages/torch/nn/modules/linear.py", 125, "forward"},
                         {"/x/site-packages/torch/nn/modules/module.py", 1750, "_call_impl"},
                         {"/home/me/model.py", 42, "forward"},
                         {"/home/me/train.py", 9, "<module>"}});
  CHECK(gmp::user_frame_label(stack) == "forward at /home/me/model.py:42");
  CHECK(gmp::package_frame(stack) == nullptr);
  // A model library (an installed package) allocates on behalf of the user's line: the label names
  // the user's line, then the library's.
  const Frame gelu{"/opt/venv/lib/python3.12/site-packages/transformers/activations.py", 66, "forward"};
  const Frame call{"/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 1750, "_call_impl"};
  const Frame step{"/home/me/train.py", 57, "step"};
  const gmp::Frames hf = std::make_shared<const std::vector<Frame>>(
      std::vector<Frame>{call,
                         gelu,
                         call,
                         {"/usr/lib/python3/dist-packages/transformers/models/gpt2/modeling_gpt2.py", 300, "forward"},
                         call,
                         step,
                         {"/home/me/train.py", 80, "<module>"},
                         {"<frozen runpy>", 88, "_run_code"}});
  CHECK(*gmp::user_frame(hf) == step);
  CHECK(*gmp::package_frame(hf) == gelu);
  CHECK(gmp::user_frame_label(hf) ==
        "step at /home/me/train.py:57 (in forward at "
        "/opt/venv/lib/python3.12/site-packages/transformers/activations.py:66)");
  // Only a library's frames: its line, alone.
  const gmp::Frames lib_only =
      std::make_shared<const std::vector<Frame>>(std::vector<Frame>{call, gelu, {"<frozen runpy>", 88, "_run_code"}});
  CHECK(*gmp::user_frame(lib_only) == gelu);
  CHECK(gmp::user_frame_label(lib_only) ==
        "forward at /opt/venv/lib/python3.12/site-packages/transformers/activations.py:66");
  // A library that calls the user's code back (a trainer): the user's line, alone.
  const gmp::Frames callback = std::make_shared<const std::vector<Frame>>(
      std::vector<Frame>{call,
                         {"/home/me/model.py", 42, "training_step"},
                         {"/opt/venv/lib/python3.12/site-packages/lightning/trainer.py", 900, "fit"},
                         step});
  CHECK(gmp::package_frame(callback) == nullptr);
  CHECK(gmp::user_frame_label(callback) == "training_step at /home/me/model.py:42");
}

TEST_CASE("Python frames reach the snapshot in PyTorch's frame format (filename, line, name)") {
  WithHooks hooks;
  Recorded r({.stacks = HistoryStacks::python});
  void* p = r.a().allocate(4096);
  const auto path = temp_path("python-frames.pickle");
  gmp::dump_snapshot(r.a(), path.string());
  r.a().deallocate(p);
  r.a().validate();
  if (!have_python()) return;
  const auto script = temp_path("python-frames-check.py");
  {
    std::ofstream out(script);
    out << "import pickle, sys\n"
           "s = pickle.load(open(sys.argv[1], 'rb'))\n"
           "blocks = [b for seg in s['segments'] for b in seg['blocks'] if b['state'] == 'active_allocated']\n"
           "assert len(blocks) == 1, blocks\n"
           "f = blocks[0]['frames']\n"
           "assert f[1] == {'filename': '/home/me/model.py', 'line': 42, 'name': 'forward'}, f\n"
           "alloc = [e for e in s['device_traces'][0] if e['action'] == 'alloc'][0]\n"
           "assert alloc['frames'] == f, alloc\n"
           "assert sorted(alloc['frames'][2]) == ['filename', 'line', 'name']\n";
  }
  const std::string cmd = "python3 " + script.string() + " " + path.string();
  CHECK(std::system(cmd.c_str()) == 0);
  std::filesystem::remove(path);
  std::filesystem::remove(script);
}
