// Layer 0: version, feature switches and the versioned namespace.
//
// Every switch is always defined to 0 or 1 (test with #if, never #ifdef) and may be set by the
// user or the build system before the first include. The Meson dependency and the pkg-config
// file set them to match the libraries they link.
#pragma once

// One clear message instead of hundreds of errors from concepts and designated initializers.
#if defined(_MSVC_LANG) ? _MSVC_LANG < 202002L : __cplusplus < 202002L
#error \
    "gpumemprof needs C++20: compile with -std=c++20 (pkg-config --cflags gpumemprof and the CMake target gpumemprof::gpumemprof add it)"
#endif

#define GPUMEMPROF_VERSION_MAJOR 0
#define GPUMEMPROF_VERSION_MINOR 1
#define GPUMEMPROF_VERSION_PATCH 0
#define GPUMEMPROF_VERSION_STRING "0.1.0"

// 1 when the CUDA runtime is linked: enables the "cuda:N" devices.
#ifndef GPUMEMPROF_WITH_CUDA
#define GPUMEMPROF_WITH_CUDA 0
#endif

// 1 when Boost.Stacktrace (link mode) is linked: enables C++ stack capture in history.
#ifndef GPUMEMPROF_WITH_STACKTRACE
#define GPUMEMPROF_WITH_STACKTRACE 0
#endif

// 1 when CUPTI's headers are available (with CUDA): memory outside the allocator can be
// tracked (track_external_memory); libcupti itself is opened at run time.
#ifndef GPUMEMPROF_WITH_CUPTI
#define GPUMEMPROF_WITH_CUPTI 0
#endif

// 1 when NVTX3 headers are available: profiled scopes open NVTX ranges.
#ifndef GPUMEMPROF_WITH_NVTX
#define GPUMEMPROF_WITH_NVTX 0
#endif

// 1 makes every allocator operation run validate() afterwards (slow; for debugging).
#ifndef GPUMEMPROF_DEBUG_VALIDATE
#define GPUMEMPROF_DEBUG_VALIDATE 0
#endif

// 1 makes every split, merge and hole of the allocator check the block links it changes, and
// stop the program if they are broken (allocator/segment_chain.hpp). Default: on without NDEBUG.
#ifndef GPUMEMPROF_CHECK_LINKS
#ifdef NDEBUG
#define GPUMEMPROF_CHECK_LINKS 0
#else
#define GPUMEMPROF_CHECK_LINKS 1
#endif
#endif

// Functions the optional compiled library (libgpumemprof, lib/) defines once: `inline` in
// header-only mode, plain in the library's own sources (GPUMEMPROF_LIB_SOURCE). Programs built
// with GPUMEMPROF_COMPILED_LIB see only their declarations (the -inl headers are left out).
#ifdef GPUMEMPROF_LIB_SOURCE
#define GPUMEMPROF_FUNC
#else
#define GPUMEMPROF_FUNC inline
#endif

// A versioned inline namespace, so two copies of this header-only library in one program
// cannot silently mix their types.
#define GPUMEMPROF_NAMESPACE_BEGIN \
  namespace gpumemprof {           \
  inline namespace v0 {
#define GPUMEMPROF_NAMESPACE_END \
  }                              \
  }

#if defined(__GNUC__) || defined(__clang__)
#define GPUMEMPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define GPUMEMPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GPUMEMPROF_NOINLINE __attribute__((noinline))
#else
#define GPUMEMPROF_LIKELY(x) (x)
#define GPUMEMPROF_UNLIKELY(x) (x)
#define GPUMEMPROF_NOINLINE
#endif
