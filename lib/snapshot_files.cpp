// The compiled library's snapshot files: the snapshot writer and reader (pickle and JSON), the
// compact traces the reader builds, dump_snapshot for the default allocators and the rank dump's
// file helpers, defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/export/formats/dump_snapshot-inl.hpp"
#include "gpumemprof/export/formats/rank_dump-inl.hpp"
#include "gpumemprof/export/formats/snapshot_reader-inl.hpp"
#include "gpumemprof/export/formats/snapshot_writer-inl.hpp"
#include "gpumemprof/history/compact_snapshot-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
template void dump_snapshot<AnyBackend>(const CachingAllocator<AnyBackend>&, const std::string&);
GPUMEMPROF_NAMESPACE_END
