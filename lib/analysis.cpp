// The compiled library's analysis: the segment facts, the user's-frame rule, the OOM report
// (its text, and make_oom_report and attach_oom_reporter for the default allocator's type) and the
// forecast (request streams, their alignment, forecast_peak), defined once here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
// The forecast replays its target stream through a CachingAllocator on a simulated device: its
// bodies are instantiated here for SimulatedBackend (the library's own allocator, AnyBackend, is
// instantiated once, in caching_allocator.cpp, and stays extern here).
#include "gpumemprof/allocator/caching_allocator_bodies-inl.hpp"
#include "gpumemprof/analysis/forecast-inl.hpp"
#include "gpumemprof/analysis/forecast_next_probe-inl.hpp"
#include "gpumemprof/analysis/memory_facts-inl.hpp"
#include "gpumemprof/analysis/oom_report-inl.hpp"
#include "gpumemprof/analysis/request_stream-inl.hpp"
#include "gpumemprof/analysis/stream_alignment-inl.hpp"
#include "gpumemprof/analysis/user_frame-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

template OomReport make_oom_report<AnyBackend>(const CachingAllocator<AnyBackend>&, const OomInfo&, std::size_t);
template std::shared_ptr<OomReporter> attach_oom_reporter<AnyBackend>(CachingAllocator<AnyBackend>&, OomReportOptions);

GPUMEMPROF_NAMESPACE_END
