// The NVTX integration compiles (against the real NVTX3 headers when the build has them) and
// registers its scope hook; with no profiling tool attached the ranges are no-ops.
#include "catch.hpp"
#include "gpumemprof/integrations/nvtx.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "profiler_test_util.hpp"

TEST_CASE("nvtx: the scope hook is registered exactly when NVTX is available") {
  CHECK(gmp::nvtx_scope_ranges_enabled() == gmp::nvtx_available);
  if (gmp::nvtx_available) CHECK(gmp::scope_hook_count() >= 1);
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  {
    auto outer = profiler.profile_context("nvtx_outer");
    const auto r = profiler.profile_function("nvtx_inner", [&] { d.free(d.alloc(MiB)); });
    CHECK(r.memory_allocated == iMiB);
  }
  CHECK(profiler.results().size() == 2);
}
