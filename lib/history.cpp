// The compiled library's history layer: the history recorder, the category ledgers and the
// snapshot builder (snapshot() of the default allocators' type), defined once here for
// GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/history/category_ledger-inl.hpp"
#include "gpumemprof/history/history_recorder-inl.hpp"
#include "gpumemprof/history/snapshot_builder-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template Snapshot snapshot<AnyBackend>(const CachingAllocator<AnyBackend>&);

GPUMEMPROF_NAMESPACE_END
