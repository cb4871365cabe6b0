// Parsing PYTORCH_CUDA_ALLOC_CONF-style strings; every bad input names its key.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "catch.hpp"
#include "gpumemprof/allocator/allocator_config.hpp"
#include "sim_allocator.hpp"
#include "tune_grid.hpp"

using Catch::Matchers::Contains;
using gmp::AllocatorConfig;
using gmp::ConfigError;

TEST_CASE("defaults") {
  const AllocatorConfig c;
  CHECK(c.max_split_size == AllocatorConfig::unlimited);
  CHECK(c.max_split_size_stat() == -1);
  CHECK(c.max_non_split_rounding_size == 20 * MiB);
  CHECK(c.garbage_collection_threshold == 0.0);
  CHECK_FALSE(c.expandable_segments);
  CHECK_FALSE(c.per_process_memory_fraction.has_value());
  CHECK_FALSE(c.release_lock_on_cudamalloc);
  for (auto d : c.roundup_power2_divisions) CHECK(d == 0);
  CHECK(AllocatorConfig("").max_split_size == AllocatorConfig::unlimited);
}

TEST_CASE("every key, with whitespace ignored") {
  const AllocatorConfig c(
      " max_split_size_mb : 128 , garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,>:4],"
      "expandable_segments:False,max_non_split_rounding_mb:64,per_process_memory_fraction:0.5,backend:native");
  CHECK(c.max_split_size == 128 * MiB);
  CHECK(c.max_split_size_stat() == static_cast<std::int64_t>(128 * MiB));
  CHECK(c.garbage_collection_threshold == Approx(0.6));
  CHECK(c.roundup_power2_divisions[8] == 1);
  CHECK(c.roundup_power2_divisions[9] == 4);
  CHECK_FALSE(c.expandable_segments);
  CHECK(c.max_non_split_rounding_size == 64 * MiB);
  CHECK(c.per_process_memory_fraction.value() == Approx(0.5));
  CHECK(AllocatorConfig("expandable_segments:True").expandable_segments);
  CHECK(AllocatorConfig("roundup_power2_divisions:8").roundup_power2_divisions[15] == 8);
  CHECK_FALSE(c.release_lock_on_cudamalloc);
  CHECK(AllocatorConfig("release_lock_on_cudamalloc:True").release_lock_on_cudamalloc);
  CHECK(AllocatorConfig("release_lock_on_hipmalloc:True").release_lock_on_cudamalloc);  // PyTorch's ROCm spelling
  CHECK_FALSE(AllocatorConfig("release_lock_on_cudamalloc:False").release_lock_on_cudamalloc);
}

TEST_CASE("bad values and unknown keys are errors that name the key") {
  CHECK_THROWS_WITH(AllocatorConfig("max_split_size_mb:19"), Contains("max_split_size_mb") && Contains(">= 20"));
  CHECK_THROWS_WITH(AllocatorConfig("max_split_size_mb:abc"), Contains("max_split_size_mb"));
  CHECK_THROWS_WITH(AllocatorConfig("max_split_size_mb"), Contains("ended early"));
  CHECK_THROWS_WITH(AllocatorConfig("garbage_collection_threshold:1.0"), Contains("garbage_collection_threshold"));
  CHECK_THROWS_WITH(AllocatorConfig("garbage_collection_threshold:0"), Contains("(0.0, 1.0)"));
  CHECK_THROWS_WITH(AllocatorConfig("roundup_power2_divisions:3"), Contains("power of 2"));
  CHECK_THROWS_WITH(AllocatorConfig("roundup_power2_divisions:[100:2]"), Contains("powers of 2"));
  CHECK_THROWS_WITH(AllocatorConfig("roundup_power2_divisions:[256:2"), Contains("']'"));
  CHECK_THROWS_WITH(AllocatorConfig("expandable_segments:yes"), Contains("'True' or 'False'"));
  CHECK_THROWS_WITH(AllocatorConfig("release_lock_on_cudamalloc:1"),
                    Contains("'release_lock_on_cudamalloc'") && Contains("'True' or 'False'"));
  CHECK_THROWS_WITH(AllocatorConfig("release_lock_on_cudamalloc"), Contains("ended early"));
  CHECK_THROWS_WITH(AllocatorConfig("max_split_sise_mb:100"),
                    Contains("'max_split_sise_mb'") && Contains("not an allocator option"));
  CHECK_THROWS_WITH(AllocatorConfig("backend:cudaMallocAsync"), Contains("backend"));
  CHECK_THROWS_WITH(AllocatorConfig("max_split_size_mb:100;expandable_segments:True"), Contains("max_split_size_mb"));
  CHECK_THROWS_AS(AllocatorConfig("per_process_memory_fraction:2"), ConfigError);
  CHECK_THROWS_AS(AllocatorConfig("max_split_size_mb:100 expandable_segments"), ConfigError);
}

TEST_CASE("config errors are std::invalid_argument") {
  CHECK_THROWS_AS(AllocatorConfig("nope:1"), std::invalid_argument);
}

TEST_CASE("GPUMEMPROF_ALLOC_CONF is read by from_env and its errors say so") {
  ::setenv("GPUMEMPROF_ALLOC_CONF", "max_split_size_mb:64", 1);
  CHECK(AllocatorConfig::from_env().max_split_size == 64 * MiB);
  ::setenv("GPUMEMPROF_ALLOC_CONF", "max_split_size_mb:1", 1);
  CHECK_THROWS_WITH(AllocatorConfig::from_env(), Contains("GPUMEMPROF_ALLOC_CONF"));
  ::unsetenv("GPUMEMPROF_ALLOC_CONF");
  CHECK(AllocatorConfig::from_env().max_split_size == AllocatorConfig::unlimited);
}

TEST_CASE("per_process_memory_fraction in the config caps the allocator") {
  SimAlloc s("per_process_memory_fraction:0.25", 100 * MiB);
  CHECK_THROWS_AS(s.a.allocate(30 * MiB), gmp::OutOfMemoryError);
  void* p = s.a.allocate(24 * MiB);
  s.a.deallocate(p);
  s.a.validate();
}

TEST_CASE("PyTorch's pinned_* and graph-capture keys: accepted with PyTorch's value rules, ignored with one line") {
  const AllocatorConfig c(
      "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,pinned_use_background_threads:True,"
      "pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True,expandable_segments:True");
  CHECK(c.expandable_segments);  // the keys around them still apply
  REQUIRE(c.ignored.size() == 5);
  const char* keys[] = {"pinned_use_cuda_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
                        "pinned_reserve_segment_size_mb", "graph_capture_record_stream_reuse"};
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK_THAT(c.ignored[i], Contains(std::string("'") + keys[i] + "'") && Contains("ignored by gpumemprof"));
    CHECK(c.ignored[i].find('\n') == std::string::npos);  // one line each
  }
  CHECK_THAT(c.ignored[0], Contains("pinned host-memory allocator"));
  CHECK_THAT(c.ignored[4], Contains("capture"));
  CHECK(AllocatorConfig("pinned_use_hip_host_register:False").ignored.size() == 1);   // ROCm spelling
  CHECK(AllocatorConfig("graph_capture_record_stream_reuse:False").ignored.empty());  // what gpumemprof does
  CHECK(AllocatorConfig("backend:native").ignored.empty());
  // PyTorch's value rules for each.
  CHECK_THROWS_WITH(AllocatorConfig("pinned_use_cuda_host_register:1"), Contains("'True' or 'False'"));
  CHECK_THROWS_WITH(AllocatorConfig("pinned_use_background_threads:yes"), Contains("'True' or 'False'"));
  CHECK_THROWS_WITH(AllocatorConfig("graph_capture_record_stream_reuse:on"), Contains("'True' or 'False'"));
  CHECK_THROWS_WITH(AllocatorConfig("pinned_num_register_threads:3"), Contains("power of 2"));
  CHECK_THROWS_WITH(AllocatorConfig("pinned_num_register_threads:256"), Contains("<= 128"));
  CHECK_NOTHROW(AllocatorConfig("pinned_num_register_threads:128"));
  CHECK_THROWS_WITH(AllocatorConfig("pinned_reserve_segment_size_mb:0"), Contains("greater than 0"));
  CHECK_THROWS_WITH(AllocatorConfig("backend:cudaMallocAsync"), Contains("only backend:native"));
}

TEST_CASE("every key PyTorch 2.11 accepts parses (with a valid value), and nothing else does") {
  for (const std::string_view key : gmp::kPyTorchAllocatorKeys) {
    std::string value = "True";
    if (key.ends_with("_mb")) value = "64";
    if (key == "garbage_collection_threshold" || key == "per_process_memory_fraction") value = "0.5";
    if (key == "roundup_power2_divisions" || key == "pinned_num_register_threads") value = "4";
    if (key == "backend") value = "native";
    const std::string conf = std::string(key) + ":" + value;
    CHECK_NOTHROW(AllocatorConfig(conf));
  }
  CHECK_THROWS_WITH(AllocatorConfig("pinned_memory:True"), Contains("not an allocator option"));
}

TEST_CASE("gpumemprof tune proposes only keys PyTorch accepts, each one gpumemprof uses") {
  for (const std::string& conf : gpumemprof::tools::tune_grid()) {
    if (gpumemprof::tools::gpumemprof_only(conf)) {  // its own row, never handed to PyTorch
      CHECK(conf.find("compacting_expandable_segments") == 0);
      CHECK(AllocatorConfig(conf).ignored.empty());
      continue;
    }
    std::size_t start = 0;
    while (start < conf.size()) {
      const std::size_t colon = conf.find(':', start);
      REQUIRE(colon != std::string::npos);
      const std::string key = conf.substr(start, colon - start);
      CHECK(std::find(gmp::kPyTorchAllocatorKeys.begin(), gmp::kPyTorchAllocatorKeys.end(), key) !=
            gmp::kPyTorchAllocatorKeys.end());
      const std::size_t comma = conf.find(',', colon);
      start = comma == std::string::npos ? conf.size() : comma + 1;
    }
    CHECK(AllocatorConfig(conf).ignored.empty());
  }
}
