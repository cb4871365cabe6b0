// The compiled library's caching allocator: every member of CachingAllocator<AnyBackend> (the
// allocator behind default_allocator()), which GPUMEMPROF_COMPILED_LIB users declare extern.
// Built without GPUMEMPROF_COMPILED_LIB: the headers carry the bodies here.
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/device/any_backend.hpp"

template class gpumemprof::CachingAllocator<gpumemprof::AnyBackend>;
