// Replaying a real PyTorch trace ends on PyTorch's recorded counters, and the trace reader's errors.
// (Peaks against PyTorch's, exactly, every trace and both policies: test_sim_placement.cpp.)
#include <cstdlib>
#include <string>

#include "catch.hpp"
#include "replay.hpp"
#include "sim_allocator.hpp"

namespace {
std::string data_path(const std::string& name) {
  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/tests/data/" + name;
}

}  // namespace

TEST_CASE("resnet50_train replay matches PyTorch's recorded end-of-run counters") {
  // From pytorch_stats.json: the recorded run made 109 device allocations, none freed,
  // reserved 3684696064 bytes and ended with 3 live allocations of 68157440 bytes.
  const auto t = gmp::tools::load_trace(data_path("resnet50_train.trace.gz"));
  SimAlloc s;
  const auto r = gmp::tools::replay(t, s.a);
  CHECK(r.stats.num_device_alloc == 109);
  CHECK(r.stats.num_device_free == 0);
  CHECK(r.stats.allocation.all().current == 3);
  CHECK(r.stats.allocated_bytes.all().current == 68157440);
  CHECK(r.stats.reserved_bytes.all().current == 3684696064);
  CHECK(r.stats.requested_bytes.all().allocated == 41663743548);
  // Unsplit remainders depend on which of several equal-size blocks best fit picks, i.e. on the
  // device's address layout: the simulated device places segments as the driver did, so these too.
  CHECK(r.stats.allocated_bytes.all().allocated == 41919901696);
  CHECK(r.stats.allocated_bytes.all().peak == 3077896704);
}

TEST_CASE("trace reader: malformed lines name the file and line") {
  using gmp::tools::parse_trace;
  CHECK_THROWS_WITH(parse_trace("# h\na 0 100 0\nx 1\n", "t.txt"), Catch::Matchers::Contains("t.txt:3"));
  CHECK_THROWS_WITH(parse_trace("a 0 abc 0\n", "t.txt"), Catch::Matchers::Contains("t.txt:1"));
  CHECK_THROWS_WITH(parse_trace("f 4\n", "t.txt"), Catch::Matchers::Contains("not live"));
  CHECK_THROWS_WITH(parse_trace("a 0 8 0\na 0 8 0\n", "t.txt"), Catch::Matchers::Contains("allocated twice"));
  CHECK_THROWS_AS(gmp::tools::load_trace("/nonexistent/trace.gz"), gmp::IoError);
  const auto t = parse_trace("# workload=x\na 0 100 0\na 1 50 7\nf 0\n", "ok");
  CHECK(t.allocs == 2);
  CHECK(t.frees == 1);
  CHECK(t.peak_requested_bytes == 150);
  CHECK(t.header == " workload=x");
}
