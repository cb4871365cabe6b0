// The out-of-line bodies of CachingAllocator that compiled mode (GPUMEMPROF_COMPILED_LIB) leaves
// to the library, in one list: a library source that instantiates the allocator for a backend
// includes this (lib/caching_allocator.cpp for AnyBackend, lib/analysis.cpp for the simulated
// device the forecast replays through), so a new body file is added here once. Header-only
// programs get the same files through caching_allocator.hpp. Not a header to include on its own.
#pragma once

#include "gpumemprof/allocator/caching_allocator-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_events-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_pools-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_segments-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_stats-inl.hpp"
#include "gpumemprof/allocator/caching_allocator_views-inl.hpp"
#include "gpumemprof/allocator/expandable_executor-inl.hpp"
