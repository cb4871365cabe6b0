// The PyTorch bridge's Python frame hooks (python_frames.cpp); internal to libgpumemprof_torch.so.
#pragma once

#include <vector>

#include "gpumemprof/history/snapshot.hpp"

/// Installs the hooks that capture and resolve Python frames (gpumemprof/history/python_frames.hpp)
/// when this library runs inside a Python interpreter; false (nothing installed) when it does not.
bool gpumemprof_torch_install_python_frames();

/// The calling thread's Python frames now, innermost first, resolved (what an allocation made here
/// would carry with stacks="python"); empty outside Python or on a thread that runs no Python code.
std::vector<gpumemprof::Frame> gpumemprof_torch_python_stack();

/// With `on`, the calling thread's Python frames stand in for those of threads that run no Python
/// code when they allocate (autograd's threads run backward while this thread waits in
/// backward()); off, such threads get none (PyTorch's stacks="python"). False outside Python.
bool gpumemprof_torch_set_waiting_thread(bool on);
