// The PyTorch bridge called at exit: PyTorch frees tensors from its static destructors, which run
// after the calling thread's thread_local objects are destroyed. Run under valgrind (meson.build),
// any use of a destroyed object fails it; exit 0 and "late call ok" otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpumemprof_torch.h"

namespace {

void late_call() {
  if (gpumemprof_dump_snapshot(0, nullptr) != -1 || std::strstr(gpumemprof_last_error(), "no path") == nullptr) {
    std::puts("FAILED: the late call did not report its error");
    std::_Exit(1);
  }
  std::puts("late call ok");
}

}  // namespace

int main() {
  // An error first, so that the thread's message is longer than any in-place string buffer.
  if (gpumemprof_dump_snapshot(0, nullptr) != -1) return 1;
  std::atexit(late_call);  // runs after this thread's thread_local destructors
  return 0;
}
