// Layer 2: the allocator's options, parsed from PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax
// ("key:value,key:[k:v,k:v]", whitespace ignored). Keys and value rules follow PyTorch 2.11
// (c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp): an unknown key or a bad value
// is a ConfigError naming it. Every key PyTorch 2.11 accepts is accepted with PyTorch's value
// rules; those gpumemprof's device allocator does not use are listed in `ignored`, one sentence
// each saying why (the pinned_* keys configure PyTorch's pinned host allocator, which stays
// PyTorch's under the bridge; graph_capture_record_stream_reuse:True asks for a capture-time reuse
// gpumemprof does not do). backend:cudaMallocAsync is refused: gpumemprof is the native allocator.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The PyTorch caching allocator's size constants, in bytes.
inline constexpr std::size_t kMinBlockSize = 512;               // every block is a multiple of this
inline constexpr std::size_t kSmallSize = 1 << 20;              // largest request of the small pool
inline constexpr std::size_t kSmallBuffer = 2 << 20;            // small-pool segment size
inline constexpr std::size_t kMinLargeAlloc = 10 << 20;         // below this, large segments are 20 MiB
inline constexpr std::size_t kLargeBuffer = 20 << 20;           // large-pool segment size for small requests
inline constexpr std::size_t kRoundLarge = 2 << 20;             // large segments are multiples of this
inline constexpr std::size_t kRoundUpPowerOfTwoIntervals = 16;  // 1 MiB ... 64 GiB

/// Every key of PyTorch 2.11's allocator configuration (PYTORCH_ALLOC_CONF), ROCm spellings included.
inline constexpr std::array<std::string_view, 15> kPyTorchAllocatorKeys = {"max_split_size_mb",
                                                                           "max_non_split_rounding_mb",
                                                                           "garbage_collection_threshold",
                                                                           "roundup_power2_divisions",
                                                                           "expandable_segments",
                                                                           "release_lock_on_cudamalloc",
                                                                           "release_lock_on_hipmalloc",
                                                                           "per_process_memory_fraction",
                                                                           "backend",
                                                                           "pinned_use_cuda_host_register",
                                                                           "pinned_use_hip_host_register",
                                                                           "pinned_num_register_threads",
                                                                           "pinned_use_background_threads",
                                                                           "pinned_reserve_segment_size_mb",
                                                                           "graph_capture_record_stream_reuse"};

/// PyTorch's limit on pinned_num_register_threads.
inline constexpr std::size_t kPinnedMaxRegisterThreads = 128;

struct AllocatorConfig {
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

  /// Blocks at least this large are never split, and requests below it never take them (bytes).
  std::size_t max_split_size = unlimited;
  /// A request >= max_split_size takes a cached block only if the block is smaller than
  /// request + this (bytes).
  std::size_t max_non_split_rounding_size = kLargeBuffer;
  /// Per power-of-two interval of request sizes (index 0: < 2 MiB ... 15: >= 32 GiB), the number
  /// of divisions to round up to; 0 or 1 = plain 512-byte rounding.
  std::array<std::size_t, kRoundUpPowerOfTwoIntervals> roundup_power2_divisions{};
  /// With a memory fraction set: reclaim cached blocks when reserved memory exceeds this
  /// fraction of the allowed memory (0 = off).
  double garbage_collection_threshold = 0.0;
  /// PyTorch's expandable segments: each (stream, pool) reserves one address range and maps pages
  /// (20 MiB for the large pool, 2 MiB for the small one) at its end as it fills, instead of new
  /// cudaMallocs; pages go back only in empty_cache and the OOM sequence, as in PyTorch.
  bool expandable_segments = false;
  /// gpumemprof-only (key compacting_expandable_segments): expandable segments with a compacting
  /// policy -- 2 MiB pages, growth where the fewest pages must be mapped, and free pages moved to
  /// where they are needed once reserved reaches ~1.03x the most bytes ever live. Implies
  /// expandable segments. PyTorch has no such option.
  bool compacting_expandable_segments = false;
  /// PyTorch's option: a new segment's device malloc (cudaMalloc) runs with no allocator lock
  /// held, so other threads -- on the same stream too -- allocate, free and create segments
  /// meanwhile. Off, only the allocating stream and the other slow paths wait for it.
  bool release_lock_on_cudamalloc = false;
  /// Fraction of the device this allocator may reserve (unset: no cap until set_memory_fraction).
  std::optional<double> per_process_memory_fraction;
  /// The string this config was parsed from (allocator_settings' PYTORCH_CUDA_ALLOC_CONF).
  std::string source;
  /// PyTorch keys accepted but not used by gpumemprof, one sentence each naming the key and why
  /// (a host such as the PyTorch bridge prints them once).
  std::vector<std::string> ignored;

  AllocatorConfig() = default;
  /// Parses an ALLOC_CONF string; throws ConfigError.
  explicit AllocatorConfig(std::string_view conf) : AllocatorConfig(parse(conf)) {}

  /// Whether segments are expandable, with PyTorch's policy or the compacting one.
  [[nodiscard]] bool uses_expandable_segments() const noexcept {
    return expandable_segments || compacting_expandable_segments;
  }

  /// $GPUMEMPROF_ALLOC_CONF when set, else the defaults.
  static AllocatorConfig from_env();

  /// Parses an ALLOC_CONF string; throws ConfigError.
  static AllocatorConfig parse(std::string_view conf);

  /// Divisions configured for requests of `size` bytes (PyTorch's roundup_power2_divisions()).
  [[nodiscard]] std::size_t divisions_for(std::size_t size) const noexcept {
    const std::size_t log_size = size == 0 ? 0 : 63 - static_cast<std::size_t>(__builtin_clzll(size));
    std::size_t index = log_size > 20 ? log_size - 20 : 0;
    if (index > kRoundUpPowerOfTwoIntervals - 1) index = kRoundUpPowerOfTwoIntervals - 1;
    return roundup_power2_divisions[index];
  }

  /// max_split_size in PyTorch's stats convention: -1 when unlimited.
  [[nodiscard]] std::int64_t max_split_size_stat() const noexcept {
    return max_split_size == unlimited ? -1 : static_cast<std::int64_t>(max_split_size);
  }

 private:
  class Tokens;  // the string split at , : [ ]

  static bool is_pow2(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

  static constexpr std::string_view kPinnedReason =
      "it configures PyTorch's pinned host-memory allocator, which gpumemprof does not replace (under the "
      "bridge PyTorch still reads it)";

  // Records a PyTorch key that gpumemprof accepts and does not use, with why.
  void ignore(const std::string& key, std::string_view why);

  // "4" (every interval) or "[256:1,512:2,>:8]" (keys: MiB boundaries, powers of two).
  // Like PyTorch: the first boundary also fills every interval below it, ">" fills every
  // interval after the last boundary, and intervals between listed boundaries stay 0.
  std::size_t parse_roundup(const Tokens& t, std::size_t i);
};

GPUMEMPROF_NAMESPACE_END

// The parser: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/allocator_config.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/allocator/allocator_config-inl.hpp"
#endif
