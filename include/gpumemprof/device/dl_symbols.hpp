// Layer 1: names of code addresses by dladdr -- the exported function (demangled) or the object
// and offset -- for the stacks of allocations made outside gpumemprof's allocators.
#pragma once

#include <string>

#include "gpumemprof/config.hpp"

#if defined(__linux__)
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// The demangled name of the exported function holding a code address dladdr described; "" when
/// its symbol is not exported.
inline std::string function_name(const Dl_info& info) {
  if (info.dli_sname == nullptr) return {};
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

/// "+0x1a2b": where `pc` lies in the object dladdr described.
inline std::string object_offset(const Dl_info& info, const char* pc) {
  char off[32];
  std::snprintf(off, sizeof off, "+0x%zx", static_cast<std::size_t>(pc - static_cast<const char*>(info.dli_fbase)));
  return off;
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
#endif
