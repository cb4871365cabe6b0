// MemoryStats indexed like PyTorch's dict: stats["allocated_bytes.all.peak"], over exactly the
// keys as_map() yields.
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "sim_allocator.hpp"

TEST_CASE("MemoryStats: operator[] and at() take exactly as_map()'s keys") {
  SimAlloc s;
  void* small = s.a.allocate(1000);
  void* large = s.a.allocate(3 * MiB);
  s.a.deallocate(small);
  const gmp::MemoryStats st = s.stats();
  CHECK(st["allocated_bytes.all.peak"] == static_cast<std::int64_t>(512 * 2 + 3 * MiB));
  CHECK(st["allocated_bytes.all.current"] == static_cast<std::int64_t>(3 * MiB));
  CHECK(st.at("allocation.small_pool.freed") == 1);
  CHECK(st["requested_bytes.large_pool.current"] == static_cast<std::int64_t>(3 * MiB));
  CHECK(st["num_device_alloc"] == 2);
  CHECK(st["max_split_size"] == -1);
  const auto m = st.as_map();
  for (const auto& [key, value] : m) {
    INFO(key);
    CHECK(st[key] == value);
  }
  s.a.deallocate(large);
}

TEST_CASE("MemoryStats: an unknown key is std::out_of_range naming it") {
  const gmp::MemoryStats st;
  for (const char* key : {"allocated.all.current", "allocated_bytes.all", "allocated_bytes.all.peak.", "num_oom",
                          "allocated_bytes.everything.peak", "", "oversize_segments.all.peak", ".num_ooms"}) {
    INFO(key);
    try {
      (void)st.at(key);
      FAIL("no exception");
    } catch (const std::out_of_range& e) {
      CHECK(std::string(e.what()).find(std::string("'") + key + "'") != std::string::npos);
    }
    CHECK_THROWS_AS(st[key], std::out_of_range);
  }
}
