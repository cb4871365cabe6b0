// Layer 1: who made a CUDA call -- the first library on the stack outside CUDA's own (libcuda,
// libcudart, libcupti), by dladdr: "libnccl.so", "libcublas.so", or the program's file name, and
// the function there. Used by the CUPTI capture (device/cupti.hpp) inside its callbacks.
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"

#if GPUMEMPROF_WITH_CUDA && GPUMEMPROF_WITH_CUPTI
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

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
};

/// The first frame outside CUDA's libraries above the CUDA call that is running.
inline Caller caller_outside_cuda() {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
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
    Caller c{owner_name(info.dli_fname), {}};
    if (info.dli_sname != nullptr) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      c.site = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
      std::free(demangled);
      if (const auto paren = c.site.find('('); paren != std::string::npos) c.site.resize(paren);
    } else {
      char off[32];
      std::snprintf(off, sizeof off, "+0x%zx", static_cast<std::size_t>(pc - static_cast<const char*>(info.dli_fbase)));
      c.site = c.owner + off;
    }
    return c;
  }
  return {};
}

}  // namespace detail::cupti
GPUMEMPROF_NAMESPACE_END
#endif
