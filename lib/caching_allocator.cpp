// The compiled library's caching allocator: every member of CachingAllocator<AnyBackend> (the
// allocator behind default_allocator()), which GPUMEMPROF_COMPILED_LIB programs declare extern.
// The library's sources are built as its users are (GPUMEMPROF_COMPILED_LIB): each includes the
// bodies of its own concept only.
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/any_backend.hpp"

#include "gpumemprof/allocator/caching_allocator_bodies-inl.hpp"

template class gpumemprof::CachingAllocator<gpumemprof::AnyBackend>;
