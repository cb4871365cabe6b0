// Layer 1: who made a CUDA call -- the first library on the stack outside CUDA's own (libcuda,
// libcudart, libcupti), by dladdr: "libnccl.so", "libcublas.so", or the program's file name, and
// the function there. Used by the CUPTI capture (device/cupti.hpp) inside its callbacks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/dl_symbols.hpp"
#include "gpumemprof/device/external_memory.hpp"

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI
#include <dlfcn.h>
#include <execinfo.h>

#include <cerrno>

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail::cupti {

/// Whether `file` (a shared object's path) is CUDA's own plumbing, never an owner.
inline bool is_cuda_plumbing(std::string_view file) {
  const std::string_view base = file.substr(file.rfind('/') + 1);  // npos + 1 == 0
  for (const std::string_view p : {"libcuda.so", "libcudart.so", "libcupti.so", "libnvidia-"}) {
    if (base.substr(0, p.size()) == p) return true;
  }
  return false;
}

/// "/usr/lib/libnccl.so.2.28.9" -> "libnccl.so"; the program -> its file name.
inline std::string owner_name(const char* file) {
  std::string_view f = file != nullptr ? file : "";
  if (f.empty()) f = program_invocation_short_name;
  f = f.substr(f.rfind('/') + 1);
  if (const auto so = f.find(".so"); so != std::string_view::npos) f = f.substr(0, so + 3);
  return std::string(f);
}

struct Caller {
  std::string owner = "unknown";
  std::string site;
  std::vector<std::uintptr_t> stack;  ///< from the caller's frame outward, when stacks are on
};

/// The first frame outside CUDA's libraries above the CUDA call that is running (and, with stacks
/// on, the stack from there).
inline Caller caller_outside_cuda() {
  void* frames[64 + max_external_stack_frames];
  const int n = ::backtrace(frames, static_cast<int>(std::size(frames)));
  bool inside_cuda = false;
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    const auto* pc = static_cast<const char*>(frames[i]) - 1;  // inside the call, not after it
    if (::dladdr(pc, &info) == 0 || info.dli_fname == nullptr) continue;
    if (is_cuda_plumbing(info.dli_fname)) {
      inside_cuda = true;
      continue;
    }
    if (!inside_cuda) continue;  // the capture's own frames, below CUPTI
    Caller c{owner_name(info.dli_fname), {}, {}};
    if (external_stacks.load(std::memory_order_relaxed)) c.stack = bounded_stack(frames, i, n);
    c.site = function_name(info);
    if (const auto paren = c.site.find('('); paren != std::string::npos) c.site.resize(paren);
    if (c.site.empty()) c.site = c.owner + object_offset(info, pc);
    return c;
  }
  return {};
}

}  // namespace detail::cupti
GPUMEMPROF_NAMESPACE_END
#endif
