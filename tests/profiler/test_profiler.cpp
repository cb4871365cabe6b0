// GPUMemoryProfiler: construction, profiled functions and scopes, exceptions, summary,
// device-level mode. Everything on simulated devices.
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "profiler_test_util.hpp"

namespace {

struct CustomError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Sets $GPUMEMPROF_DEVICE for one test.
struct ScopedDeviceEnv {
  explicit ScopedDeviceEnv(const char* value) {
    if (const char* old = std::getenv("GPUMEMPROF_DEVICE")) saved = old;
    ::setenv("GPUMEMPROF_DEVICE", value, 1);
  }
  ~ScopedDeviceEnv() {
    if (saved.empty()) {
      ::unsetenv("GPUMEMPROF_DEVICE");
    } else {
      ::setenv("GPUMEMPROF_DEVICE", saved.c_str(), 1);
    }
  }
  std::string saved;
};

}  // namespace

TEST_CASE("profiler: constructs from a name, a Device, options, {} and nothing") {
  static_assert(!std::is_copy_constructible_v<gmp::GPUMemoryProfiler>);
  static_assert(!std::is_move_constructible_v<gmp::GPUMemoryProfiler>);

  gmp::GPUMemoryProfiler by_name("sim:2");
  CHECK(by_name.device_name() == "sim:2");
  CHECK(by_name.device_id() == 2);
  CHECK(by_name.allocator_level());

  gmp::GPUMemoryProfiler by_device(gmp::Device::sim(3));
  CHECK(by_device.device_name() == "sim:3");

  gmp::GPUMemoryProfiler by_options(
      {.device = "sim:4", .track_tensors = true, .track_cpu_memory = true, .collect_stack_traces = false});
  CHECK(by_options.device_name() == "sim:4");
  CHECK(by_options.options().track_cpu_memory);

  {
    ScopedDeviceEnv env("sim:5");  // the current device
    gmp::GPUMemoryProfiler braces({});
    CHECK(braces.device_name() == "sim:5");
    REQUIRE(braces.options().device.has_value());
    CHECK(braces.options().device->str() == "sim:5");
    gmp::GPUMemoryProfiler plain;
    CHECK(plain.device_name() == "sim:5");
  }
}

TEST_CASE("profiler: an unknown device is refused with the available ones named") {
  try {
    gmp::GPUMemoryProfiler p("sim:99");
    FAIL("no exception");
  } catch (const gmp::DeviceError& e) {
    const std::string what = e.what();
    CHECK(what.find("sim:99") != std::string::npos);
    CHECK(what.find("available") != std::string::npos);
  }
  CHECK_THROWS_AS(gmp::GPUMemoryProfiler("gpu0"), gmp::DeviceError);
  CHECK_THROWS_AS(gmp::GPUMemoryProfiler({.device = "sim:-1"}), gmp::DeviceError);
  if (gmp::cuda_device_count() == 0) {
    CHECK_THROWS_AS(gmp::GPUMemoryProfiler(0), gmp::DeviceError);
    CHECK_THROWS_AS(gmp::GPUMemoryProfiler("cuda:0"), gmp::DeviceError);
  }
  SimDevice d;
  CHECK_THROWS_AS(gmp::GPUMemoryProfiler(d.allocator, {.device = "sim:1"}), gmp::DeviceError);
  CHECK_NOTHROW(gmp::GPUMemoryProfiler(d.allocator, {.device = "sim:0"}));
}

TEST_CASE("profiler: profile_function reports gross bytes, counts, net change and the interval's peak") {
  SimDevice d;
  // A global peak of 108 MiB before profiling; profiling must neither report nor reset it.
  void* kept = d.alloc(8 * MiB);
  d.free(d.alloc(100 * MiB));
  gmp::GPUMemoryProfiler profiler(d.allocator);
  std::vector<void*> left;

  const gmp::ProfileResult r = profiler.profile_function(
      "train_step",
      [&](std::size_t first) {
        void* a = d.alloc(first);
        left.push_back(d.alloc(2 * MiB));
        d.free(a);
        left.push_back(d.alloc(1 * MiB));
      },
      4 * MiB);

  CHECK(r.name == "train_step");
  CHECK(r.memory_allocated == 7 * iMiB);
  CHECK(r.memory_freed == 4 * iMiB);
  CHECK(r.memory_diff() == 3 * iMiB);
  CHECK(r.tensors_created == 3);
  CHECK(r.tensors_deleted == 1);
  CHECK(r.memory_before.allocated_memory == 8 * iMiB);
  CHECK(r.memory_after.allocated_memory == 11 * iMiB);
  CHECK(r.peak_memory_usage() == 14 * iMiB);  // 8 kept + 4 + 2, absolute
  CHECK(r.memory_peak.allocated_memory == 14 * iMiB);
  CHECK(r.memory_after.reserved_memory >= r.memory_after.allocated_memory);
  CHECK(r.memory_before.operation == "train_step");
  CHECK(r.memory_before.device_id == 0);
  CHECK_FALSE(r.memory_before.device_used_memory.has_value());  // scopes read only the gauges
  CHECK(r.execution_time >= 0.0);
  CHECK(r.memory_after.timestamp >= r.memory_before.timestamp);
  CHECK_FALSE(r.threw());
  CHECK(d.allocator.memory_stats().allocated_bytes.all().peak == 108 * iMiB);

  const auto results = profiler.results();
  REQUIRE(results.size() == 1);
  CHECK(results[0].memory_allocated == r.memory_allocated);
  for (void* p : left) d.free(p);
  d.free(kept);
}

TEST_CASE("profiler: track_tensors off leaves the counts out; track_cpu_memory reads RSS") {
  SimDevice d;
  gmp::GPUMemoryProfiler quiet(d.allocator, {.track_tensors = false});
  const auto r = quiet.profile_function("f", [&] { d.free(d.alloc(MiB)); });
  CHECK(r.tensors_created == 0);
  CHECK(r.memory_allocated == iMiB);
  CHECK(r.memory_before.cpu_memory == 0);

  gmp::GPUMemoryProfiler with_rss(d.allocator, {.track_cpu_memory = true});
  const auto r2 = with_rss.profile_function("g", [] {});
  CHECK(r2.memory_before.cpu_memory > 0);
  CHECK(r2.memory_after.cpu_memory > 0);
}

TEST_CASE("profiler: profile_context records at scope exit; stop() ends it early") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  {
    auto scope = profiler.profile_context("data_loading");
    CHECK(scope.active());
    CHECK(profiler.results().empty());
    d.free(d.alloc(3 * MiB));
  }
  REQUIRE(profiler.results().size() == 1);
  CHECK(profiler.results()[0].name == "data_loading");
  CHECK(profiler.results()[0].memory_allocated == 3 * iMiB);

  auto scope = profiler.profile_context("early");
  void* p = d.alloc(2 * MiB);
  const gmp::ProfileResult r = scope.stop();
  CHECK_FALSE(scope.active());
  CHECK(r.memory_diff() == 2 * iMiB);
  CHECK(profiler.results().size() == 2);
  CHECK_THROWS_AS(scope.stop(), std::logic_error);
  d.free(p);

  // A moved-from guard records nothing; the moved-to one records once.
  {
    auto a = profiler.profile_context("moved");
    gmp::ProfileScope b(std::move(a));
    CHECK_FALSE(a.active());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    CHECK(b.active());
  }
  CHECK(profiler.results().size() == 3);
  CHECK(profiler.results().back().name == "moved");
}

TEST_CASE("profiler: a throwing body is recorded with its message and rethrown unchanged") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  void* lost = nullptr;
  CHECK_THROWS_AS(profiler.profile_function("fails",
                                            [&] {
                                              lost = d.alloc(2 * MiB);
                                              throw CustomError("boom");
                                            }),
                  CustomError);
  REQUIRE(profiler.results().size() == 1);
  const auto r = profiler.results()[0];
  REQUIRE(r.threw());
  CHECK(*r.exception_message == "boom");
  CHECK(r.memory_allocated == 2 * iMiB);
  d.free(lost);

  try {
    profiler.profile_function("non_std", [] { throw 42; });
    FAIL("no exception");
  } catch (int v) {
    CHECK(v == 42);
  }
  CHECK(profiler.results().back().exception_message == "non-standard exception");
}

TEST_CASE("profiler: a guard left by unwinding is marked; messages can be attached") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  try {
    auto scope = profiler.profile_context("unwound");
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  REQUIRE(profiler.results().back().threw());
  CHECK(profiler.results().back().exception_message->find("unwinding") != std::string::npos);

  try {
    auto scope = profiler.profile_context("attached");
    try {
      throw CustomError("disk full");
    } catch (const std::exception& e) {
      scope.set_exception_message(e.what());
      throw;
    }
  } catch (const CustomError&) {
  }
  CHECK(profiler.results().back().exception_message == "disk full");

  // A scope opened and closed normally while another exception unwinds is not marked.
  struct InDestructor {
    gmp::GPUMemoryProfiler& p;
    ~InDestructor() { auto scope = p.profile_context("in_destructor"); }
  };
  try {
    InDestructor guard{profiler};
    throw 1;
  } catch (int) {
  }
  CHECK(profiler.results().back().name == "in_destructor");
  CHECK_FALSE(profiler.results().back().threw());
}

TEST_CASE("profiler: summary, table and clear_results") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  std::vector<void*> kept;
  for (int i = 0; i < 3; ++i) profiler.profile_function("forward", [&] { kept.push_back(d.alloc(MiB)); });
  profiler.profile_function("backward", [&] { d.free(d.alloc(4 * MiB)); });
  CHECK_THROWS(profiler.profile_function("backward", [] { throw std::runtime_error("nan"); }));

  const gmp::ProfileSummary s = profiler.get_summary();
  CHECK(s.device == "sim:0");
  CHECK(s.allocator_level);
  CHECK(s.total_functions_profiled == 2);
  CHECK(s.total_function_calls == 5);
  CHECK(s.total_memory_allocated == 7 * iMiB);
  CHECK(s.total_memory_freed == 4 * iMiB);
  CHECK(s.net_memory_change == 3 * iMiB);
  CHECK(s.peak_memory_usage == 7 * iMiB);  // backward: 3 kept + 4
  CHECK(s.baseline_memory_usage == 0);
  CHECK(s.current_memory_usage == 3 * iMiB);
  CHECK(s.memory_change_from_baseline == 3 * iMiB);
  CHECK_FALSE(s.monitoring_active);
  const gmp::FunctionSummary& fwd = s.function_summaries.at("forward");
  CHECK(fwd.call_count == 3);
  CHECK(fwd.avg_memory_allocated == Approx(static_cast<double>(MiB)));
  CHECK(fwd.total_memory_allocated == 3 * iMiB);
  CHECK(fwd.peak_memory == 3 * iMiB);
  CHECK(fwd.net_memory_change == 3 * iMiB);
  CHECK(fwd.avg_time == Approx(fwd.total_time / 3));
  const gmp::FunctionSummary& bwd = s.function_summaries.at("backward");
  CHECK(bwd.call_count == 2);
  CHECK(bwd.exceptions == 1);
  CHECK(bwd.avg_memory_allocated == Approx(2.0 * MiB));
  CHECK(bwd.peak_memory == 7 * iMiB);

  const std::string table = gmp::format_summary(s);
  CHECK(table.find("sim:0 (allocator level)") != std::string::npos);
  CHECK(table.find("forward") != std::string::npos);
  CHECK(table.find("backward") != std::string::npos);
  CHECK(table.find("avg allocated") != std::string::npos);
  CHECK(table.find("5 calls of 2 names") != std::string::npos);
  CHECK(table.find("1 threw") != std::string::npos);
  CHECK(table.find("n/a") == std::string::npos);
  std::ostringstream os;
  os << s;
  CHECK(os.str() == table);
  CHECK(profiler.format_summary().find("forward") != std::string::npos);

  profiler.clear_results();
  CHECK(profiler.results().empty());
  const gmp::ProfileSummary cleared = profiler.get_summary();
  CHECK(cleared.total_function_calls == 0);
  CHECK(cleared.function_summaries.empty());
  CHECK(cleared.baseline_memory_usage == 3 * iMiB);  // a new baseline
  CHECK(cleared.memory_change_from_baseline == 0);
  CHECK(profiler.baseline().operation == "baseline");
  CHECK(gmp::format_summary(cleared).find("no calls profiled") != std::string::npos);
  for (void* p : kept) d.free(p);
}

TEST_CASE("profiler: the result buffer is bounded, the summary still counts every call") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator, {.max_results = 3});
  for (int i = 0; i < 5; ++i) profiler.profile_function("call" + std::to_string(i), [] {});
  const auto results = profiler.results();
  REQUIRE(results.size() == 3);
  CHECK(results[0].name == "call2");
  CHECK(results[2].name == "call4");
  const auto s = profiler.get_summary();
  CHECK(s.total_function_calls == 5);
  CHECK(s.results_dropped == 2);
  CHECK(gmp::format_summary(s).find("2 oldest results dropped") != std::string::npos);
}

TEST_CASE("profiler: readings of the device's memory carry the bytes held outside the allocator") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator, {.level = gmp::ProfileLevel::device});
  auto scope = profiler.profile_context("communicator");
  void* buffers = d.sim().external_malloc(300 * MiB, "libnccl.so", "ncclCommInitRank");
  void* workspace = d.alloc(20 * MiB);
  const gmp::ProfileResult r = scope.stop();
  CHECK(r.memory_before.external_memory == 0);
  CHECK(r.memory_after.external_memory == 300 * iMiB);
  CHECK(r.memory_after.device_used_memory == 320 * iMiB);
  CHECK(r.memory_diff() == 320 * iMiB);
  d.sim().external_free(buffers);
  d.free(workspace);
  CHECK(gmp::read_memory(*gmp::make_memory_source(d.allocator), "now", {.device_memory = true}).external_memory == 0);
  CHECK_FALSE(gmp::read_memory(*gmp::make_memory_source(d.allocator), "now").external_memory.has_value());
}

TEST_CASE("profiler: device level reports the device's memory and no allocator fields") {
  SimDevice d;
  d.sim().set_external_usage(100 * MiB);
  gmp::GPUMemoryProfiler profiler(d.allocator, {.level = gmp::ProfileLevel::device});
  CHECK_FALSE(profiler.allocator_level());

  auto scope = profiler.profile_context("external_library");
  d.sim().set_external_usage(250 * MiB);
  profiler.sample_now();  // a monitor sample inside the interval sees the high point
  d.sim().set_external_usage(150 * MiB);
  const gmp::ProfileResult r = scope.stop();

  CHECK_FALSE(r.allocator_level);
  CHECK_FALSE(r.memory_before.allocator_level);
  CHECK(r.memory_before.device_used_memory == 100 * iMiB);
  CHECK(r.memory_after.device_used_memory == 150 * iMiB);
  CHECK(r.memory_before.device_total_memory == static_cast<std::int64_t>(GiB));
  CHECK(r.memory_diff() == 50 * iMiB);
  CHECK(r.peak_memory_usage() == 250 * iMiB);
  CHECK(r.memory_allocated == 0);
  CHECK(r.tensors_created == 0);

  // Without a sample inside, the peak is the larger of the two ends.
  const auto r2 = profiler.profile_function("plain", [&] { d.sim().set_external_usage(400 * MiB); });
  CHECK(r2.peak_memory_usage() == 400 * iMiB);

  const auto s = profiler.get_summary();
  CHECK_FALSE(s.allocator_level);
  CHECK(s.net_memory_change == 300 * iMiB);
  CHECK(s.peak_memory_usage == 400 * iMiB);
  CHECK(s.current_memory_usage == 400 * iMiB);
  CHECK(s.baseline_memory_usage == 100 * iMiB);
  const std::string table = gmp::format_summary(s);
  CHECK(table.find("device level") != std::string::npos);
  CHECK(table.find("n/a") != std::string::npos);
  REQUIRE(profiler.snapshots().size() == 1);
  CHECK(profiler.snapshots()[0].device_used_memory == 250 * iMiB);
}

TEST_CASE("profiler: the default allocator of a device is the one profiled") {
  gmp::GPUMemoryProfiler profiler("sim:6");
  auto& a = gmp::default_allocator("sim:6");
  const auto r = profiler.profile_function("f", [&] { a.deallocate(a.allocate(5 * MiB)); });
  CHECK(r.memory_allocated == 5 * iMiB);
  CHECK(r.memory_before.device_id == 6);
}

TEST_CASE("profiler: stack traces at scope entry when asked and available") {
  SimDevice d;
  gmp::GPUMemoryProfiler plain(d.allocator);
  CHECK(plain.profile_function("f", [] {}).memory_before.stack_trace == nullptr);

  gmp::GPUMemoryProfiler profiler(d.allocator, {.collect_stack_traces = true});
  const auto r = profiler.profile_function("f", [] {});
  if (!gmp::stacks_available) {
    CHECK(r.memory_before.stack_trace == nullptr);
    return;
  }
  REQUIRE(r.memory_before.stack_trace != nullptr);
  REQUIRE_FALSE(r.memory_before.stack_trace->empty());
  CHECK_FALSE(gmp::Symbolizer::is_internal(r.memory_before.stack_trace->front()));
  bool names_this_file = false;
  for (const auto& f : *r.memory_before.stack_trace) {
    names_this_file = names_this_file || f.filename.find("test_profiler.cpp") != std::string::npos;
  }
  CHECK(names_this_file);
  CHECK(r.memory_after.stack_trace == r.memory_before.stack_trace);
}

namespace {

/// A memory source whose readings the test sets, and whose synchronize can fail like a CUDA
/// device reporting an asynchronous error.
class FakeSource final : public gmp::MemorySource {
 public:
  FakeSource() : MemorySource(gmp::ProfileLevel::allocator, 3, "fake:3", true) {}
  [[nodiscard]] gmp::AllocatorGauges gauges() const noexcept override { return g; }
  [[nodiscard]] std::uint64_t open_peak_window() override { return windows.open(g.allocated_bytes); }
  std::int64_t close_peak_window(std::uint64_t id) override { return windows.close(id); }
  [[nodiscard]] std::int64_t peak_window(std::uint64_t id) const override { return windows.peak(id); }
  [[nodiscard]] std::vector<gmp::SegmentView> segments() const override { return {}; }
  [[nodiscard]] gmp::MemInfo mem_get_info() const override { return {GiB - 100, GiB}; }
  void synchronize() const override {
    ++syncs;
    if (fail_sync) throw gmp::DeviceRuntimeError("illegal memory access");
  }
  [[nodiscard]] gmp::Frames frames_of(std::uint64_t /*context*/) const override { return nullptr; }

  /// Pretends an allocation of `bytes`.
  void allocate(std::int64_t bytes) {
    g.allocated_bytes += bytes;
    g.total_allocations += 1;
    g.total_allocated_bytes += static_cast<std::uint64_t>(bytes);
    windows.on_value(g.allocated_bytes);
  }

  gmp::AllocatorGauges g{};
  gmp::detail::PeakWindows windows;
  bool fail_sync = false;
  mutable int syncs = 0;
};

}  // namespace

TEST_CASE("profiler: over any MemorySource; a failing synchronize is recorded, then reported") {
  auto source = std::make_shared<FakeSource>();
  gmp::GPUMemoryProfiler profiler(source, {});
  CHECK(profiler.device_name() == "fake:3");
  CHECK(profiler.device_id() == 3);

  const auto r = profiler.profile_function("ok", [&] { source->allocate(5); });
  CHECK(source->syncs == 2);  // before the clock at entry and at exit
  CHECK(r.memory_allocated == 5);
  CHECK(r.tensors_created == 1);
  CHECK(r.memory_before.device_id == 3);

  {
    auto scope = profiler.profile_context("async_failure");
    source->fail_sync = true;
    CHECK_THROWS_AS(scope.stop(), gmp::DeviceRuntimeError);  // after recording
  }
  REQUIRE(profiler.results().size() == 2);
  CHECK(profiler.results().back().exception_message == "device synchronize failed: illegal memory access");
  source->fail_sync = false;
  {
    auto quiet = profiler.profile_context("failure_in_destructor");
    source->fail_sync = true;
  }  // the destructor records and swallows
  CHECK(profiler.results().back().threw());
  CHECK(profiler.results().size() == 3);
  CHECK_THROWS_AS(profiler.profile_context("failure_at_entry"), gmp::DeviceRuntimeError);
  CHECK(profiler.results().size() == 3);  // a scope that never opened records nothing
  // Only the window since the profiler's baseline stays open (the summary's one peak).
  CHECK(source->windows.open_count() == 1);

  source->fail_sync = false;
  gmp::GPUMemoryProfiler unsynced(source, {.synchronize = false});
  const int before = source->syncs;
  unsynced.profile_function("f", [] {});
  CHECK(source->syncs == before);
  CHECK_THROWS_AS(gmp::GPUMemoryProfiler(nullptr, {}), std::invalid_argument);
}
