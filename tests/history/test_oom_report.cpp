// OOM forensics on a small simulated device: a constructed fragmentation OOM, a full device,
// a memory-fraction cap, and the snapshot written automatically at an OOM.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/oom_report.hpp"
#include "history_util.hpp"

namespace fs = std::filesystem;

namespace {
const std::string kOomFile = "test_oom_report.cpp";

// 30 blocks of 2 MiB fill three 20 MiB segments of a 64 MiB device; freeing every other one
// leaves 30 MiB cached in 2 MiB holes, none adjacent, and 4 MiB free on the device.
struct Fragmented {
  explicit Fragmented(const gmp::HistoryOptions& options = {}) : r(options, 64 * MiB) {
    for (int i = 0; i < 30; ++i) {
      line = __LINE__ + 1;  // the next line
      blocks.push_back(r.a().allocate(2 * MiB));
      r.a().validate();
    }
    for (std::size_t i = 0; i < blocks.size(); i += 2) {
      r.a().deallocate(blocks[i]);
      r.a().validate();
    }
  }
  ~Fragmented() {
    for (std::size_t i = 1; i < blocks.size(); i += 2) r.a().deallocate(blocks[i]);
  }
  Recorded r;
  std::vector<void*> blocks;
  int line = 0;
};
}  // namespace

TEST_CASE("A fragmentation OOM is reported with its cause, segments and allocation sites") {
  Fragmented f;
  auto& a = f.r.a();
  auto reporter = gmp::attach_oom_reporter(a);
  CHECK(reporter->count() == 0);
  CHECK_THROWS_AS((void)a.allocate(4 * MiB), gmp::OutOfMemoryError);
  a.validate();
  REQUIRE(reporter->count() == 1);
  const gmp::OomReport rep = *reporter->last();
  CHECK(rep.cause == gmp::OomCause::fragmentation);
  CHECK(rep.device_name == "sim:0");
  CHECK(rep.info.requested_bytes == 4 * MiB);
  CHECK(rep.block_bytes == 4 * MiB);
  CHECK_FALSE(rep.small_pool);
  CHECK(rep.info.allocation_bytes == 20 * MiB);
  CHECK(rep.info.device_free == 4 * MiB);
  CHECK(rep.info.reserved_bytes == 60 * MiB);
  CHECK(rep.info.allocated_bytes == 30 * MiB);
  CHECK(rep.reserved_unallocated == 30 * MiB);
  CHECK(rep.usage.free == 30 * MiB);
  CHECK(rep.usage.largest_free == 2 * MiB);
  CHECK(rep.usage.free_blocks == 15);
  CHECK(rep.usage.live_blocks == 15);
  CHECK(*rep.usage.external_fragmentation() == Approx(1.0 - 2.0 / 30.0));
  CHECK(rep.not_ours_bytes == 0);
  REQUIRE(rep.segments.size() == 3);
  for (const auto& s : rep.segments) {
    CHECK(s.facts.reserved == 20 * MiB);
    CHECK(s.facts.allocated == 10 * MiB);
    CHECK(s.facts.free == 10 * MiB);
    CHECK(s.facts.free_blocks == 5);
    CHECK(s.facts.largest_free == 2 * MiB);
  }
  REQUIRE(rep.top_sites.size() == 1);  // every live block came from one line
  CHECK(rep.top_sites[0].bytes == 30 * MiB);
  CHECK(rep.top_sites[0].count == 15);
  CHECK(rep.top_sites[0].requested_bytes == 30 * MiB);
  CHECK(rep.stacks_recorded == gmp::stacks_available);
  if (gmp::stacks_available) CHECK(starts_at(rep.top_sites[0].frames, kOomFile, f.line));
  const std::string text = rep.to_string();
  INFO(text);
  CHECK(text.find("fragmentation") != std::string::npos);
  CHECK(text.find("expandable_segments") != std::string::npos);
  CHECK(text.find("largest free block is 2.00 MiB (external fragmentation 93.3%)") != std::string::npos);
  CHECK(text.find("30.00 MiB in 15 blocks") != std::string::npos);
  if (gmp::stacks_available) CHECK(text.find(kOomFile) != std::string::npos);
}

TEST_CASE("Without history the report still explains the OOM, without stacks") {
  Fragmented f({.enabled = gmp::HistoryEnabled::off});
  auto& a = f.r.a();
  std::vector<gmp::OomReport> seen;
  auto reporter = gmp::attach_oom_reporter(
      a, {.top_sites = 3, .on_report = [&seen](const gmp::OomReport& r) { seen.push_back(r); }});
  CHECK_THROWS_AS((void)a.allocate(6 * MiB), gmp::OutOfMemoryError);
  a.validate();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].cause == gmp::OomCause::fragmentation);
  CHECK_FALSE(seen[0].stacks_recorded);
  REQUIRE(seen[0].top_sites.size() == 1);
  CHECK(seen[0].top_sites[0].frames == nullptr);
  CHECK(seen[0].to_string().find("record_memory_history") != std::string::npos);
}

TEST_CASE("A full device is reported as such, sites ranked by bytes") {
  Recorded r({}, 64 * MiB);
  auto& a = r.a();
  auto reporter = gmp::attach_oom_reporter(a);
  std::vector<void*> big, small;
  for (int i = 0; i < 2; ++i) {
    big.push_back(a.allocate(20 * MiB));
    a.validate();
  }
  for (int i = 0; i < 5; ++i) {
    small.push_back(a.allocate(4 * MiB));  // one 20 MiB segment
    a.validate();
  }
  CHECK_THROWS_AS((void)a.allocate(12 * MiB), gmp::OutOfMemoryError);
  a.validate();
  const gmp::OomReport rep = *reporter->last();
  CHECK(rep.cause == gmp::OomCause::device_full);
  CHECK(rep.usage.free == 0);
  CHECK(rep.info.device_free == 4 * MiB);
  if (gmp::stacks_available) {
    INFO(rep.to_string());
    REQUIRE(rep.top_sites.size() == 2);
    CHECK(rep.top_sites[0].bytes == 40 * MiB);
    CHECK(rep.top_sites[0].count == 2);
    CHECK(rep.top_sites[1].bytes == 20 * MiB);
    CHECK(rep.top_sites[1].count == 5);
  }
  CHECK(rep.to_string().find("device full") != std::string::npos);
  for (void* p : big) a.deallocate(p);
  for (void* p : small) a.deallocate(p);
  a.validate();
}

TEST_CASE("An OOM under a memory fraction names the fraction") {
  Recorded r({}, 64 * MiB);
  auto& a = r.a();
  a.set_memory_fraction(0.5);
  auto reporter = gmp::attach_oom_reporter(a);
  void* p = a.allocate(20 * MiB);
  a.validate();
  CHECK_THROWS_AS((void)a.allocate(20 * MiB), gmp::OutOfMemoryError);
  a.validate();
  const gmp::OomReport rep = *reporter->last();
  CHECK(rep.cause == gmp::OomCause::memory_fraction);
  CHECK(rep.info.device_total == 32 * MiB);
  CHECK(rep.info.device_free == 44 * MiB);
  CHECK(rep.to_string().find("memory fraction allows 32.00 MiB") != std::string::npos);
  a.deallocate(p);
  a.validate();
}

TEST_CASE("dump_snapshot_on_oom writes the state at the OOM, atomically") {
  Fragmented f;
  auto& a = f.r.a();
  const fs::path file = temp_path("oom.pickle");
  gmp::dump_snapshot_on_oom(a, file.string());
  // A path that cannot be written is reported, and the OOM still reaches the caller.
  gmp::dump_snapshot_on_oom(a, "/nonexistent-dir/oom.pickle");
  CHECK_THROWS_AS((void)a.allocate(4 * MiB), gmp::OutOfMemoryError);
  a.validate();
  REQUIRE(fs::exists(file));
  if (have_python()) {
    const std::string cmd =
        "python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); t=d['device_traces'][0]; "
        "sys.exit(0 if t[-2]['action']=='oom' and t[-2]['device_free']==4*2**20 and t[-1]['action']=='snapshot' "
        "and len(d['segments'])==3 else 1)\" '" +
        file.string() + "'";
    CHECK(std::system(cmd.c_str()) == 0);
  }
  fs::remove(file);
}
