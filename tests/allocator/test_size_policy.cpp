// Rounding, pool choice, segment sizes and split rules with exact numbers (docs/pytorch-compat.md).
#include "catch.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "sim_allocator.hpp"

using gmp::AllocatorConfig;
using gmp::round_size;

TEST_CASE("round_size: below 512 B rounds to 512, else to a multiple of 512") {
  const AllocatorConfig c;
  CHECK(round_size(0, c) == 512);
  CHECK(round_size(1, c) == 512);
  CHECK(round_size(511, c) == 512);
  CHECK(round_size(512, c) == 512);
  CHECK(round_size(513, c) == 1024);
  CHECK(round_size(600, c) == 1024);
  CHECK(round_size(MiB, c) == MiB);
  CHECK(round_size(MiB + 1, c) == MiB + 512);
  CHECK(round_size(11 * MiB, c) == 11 * MiB);
}

TEST_CASE("round_size with roundup_power2_divisions:4") {
  const AllocatorConfig c("roundup_power2_divisions:4");
  CHECK(round_size(1000, c) == 1024);        // <= 512*4: plain rounding
  CHECK(round_size(4096, c) == 4096);        // powers of two stay
  CHECK(round_size(9000, c) == 10240);       // 8192 + one 2048 step (plain would give 9216)
  CHECK(round_size(1200000, c) == 1310720);  // 1 MiB + one 256 KiB step
  CHECK(round_size(5 * MiB + 1, c) == 6 * MiB);
}

TEST_CASE("round_size with per-interval divisions [256:1,512:2,1024:4,>:8]") {
  const AllocatorConfig c("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  CHECK(c.roundup_power2_divisions[0] == 1);
  CHECK(c.roundup_power2_divisions[8] == 1);
  CHECK(c.roundup_power2_divisions[9] == 2);
  CHECK(c.roundup_power2_divisions[10] == 4);
  CHECK(c.roundup_power2_divisions[15] == 8);
  CHECK(round_size(300 * MiB + 1, c) == 300 * MiB + 512);    // 1 division: plain rounding
  CHECK(round_size(700 * MiB + 1, c) == 768 * MiB);          // [512 MiB, 1 GiB): halves
  CHECK(round_size(1536 * MiB + 1, c) == 1792 * MiB);        // [1 GiB, 2 GiB): quarters
  CHECK(round_size(3 * GiB + 1, c) == 3 * GiB + 256 * MiB);  // >= 2 GiB: eighths
}

TEST_CASE("roundup list: only the first boundary fills below it; gaps stay 0 as in PyTorch") {
  const AllocatorConfig c("roundup_power2_divisions:[64:8,256:4]");
  for (int i = 0; i <= 6; ++i) CHECK(c.roundup_power2_divisions[static_cast<std::size_t>(i)] == 8);
  CHECK(c.roundup_power2_divisions[7] == 0);
  CHECK(c.roundup_power2_divisions[8] == 4);
  CHECK(c.roundup_power2_divisions[9] == 0);
  CHECK(round_size(100 * MiB + 1, c) == 104 * MiB);        // [64,128) MiB: eighths of 64 MiB
  CHECK(round_size(200 * MiB + 1, c) == 200 * MiB + 512);  // [128,256) MiB: 0 -> plain
}

TEST_CASE("pool and segment size") {
  CHECK(gmp::is_small_size(512));
  CHECK(gmp::is_small_size(MiB));
  CHECK_FALSE(gmp::is_small_size(MiB + 512));
  CHECK(gmp::segment_size_for(512) == 2 * MiB);
  CHECK(gmp::segment_size_for(MiB) == 2 * MiB);
  CHECK(gmp::segment_size_for(MiB + 512) == 20 * MiB);
  CHECK(gmp::segment_size_for(10 * MiB - 512) == 20 * MiB);
  CHECK(gmp::segment_size_for(10 * MiB) == 10 * MiB);
  CHECK(gmp::segment_size_for(11 * MiB) == 12 * MiB);
  CHECK(gmp::segment_size_for(12 * MiB) == 12 * MiB);
  CHECK(gmp::segment_size_for(100 * MiB + 512) == 102 * MiB);
}

TEST_CASE("split rules") {
  const AllocatorConfig c;
  // small pool: split when the remainder is at least 512 B
  CHECK(gmp::should_split(2 * MiB, 1024, true, c));
  CHECK(gmp::should_split(1536, 1024, true, c));
  CHECK_FALSE(gmp::should_split(1024, 1024, true, c));
  // large pool: split only when the remainder exceeds 1 MiB
  CHECK(gmp::should_split(20 * MiB, MiB + 512, false, c));
  CHECK_FALSE(gmp::should_split(12 * MiB, 11 * MiB, false, c));
  CHECK(gmp::should_split(12 * MiB, 11 * MiB - 512, false, c));
  // ... and only below max_split_size
  const AllocatorConfig m("max_split_size_mb:40");
  CHECK(gmp::should_split(60 * MiB, 30 * MiB, false, m));
  CHECK_FALSE(gmp::should_split(60 * MiB, 40 * MiB, false, m));
}
