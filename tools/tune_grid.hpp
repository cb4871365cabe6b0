// `gpumemprof tune`'s grid of allocator configs: only keys PyTorch accepts (PYTORCH_ALLOC_CONF),
// so the winner can be handed to PyTorch as it is, except the rows gpumemprof_only() marks, which
// are ranked on their own and never offered as PYTORCH_CUDA_ALLOC_CONF
// (tests/allocator/test_config.cpp checks both).
#pragma once

#include <string>
#include <vector>

namespace gpumemprof::tools {

/// The configs tried, the default first (ties keep this order, so the default wins a tie).
/// garbage_collection_threshold acts only under a memory fraction (PyTorch's rule), hence the pair.
inline std::vector<std::string> tune_grid() {
  return {"",
          "max_split_size_mb:64",
          "max_split_size_mb:128",
          "max_split_size_mb:256",
          "max_split_size_mb:512",
          "roundup_power2_divisions:2",
          "roundup_power2_divisions:4",
          "roundup_power2_divisions:8",
          "garbage_collection_threshold:0.6,per_process_memory_fraction:1.0",
          "garbage_collection_threshold:0.8,per_process_memory_fraction:1.0",
          "max_split_size_mb:128,roundup_power2_divisions:4",
          "expandable_segments:True",
          "compacting_expandable_segments:True"};
}

/// Configs PyTorch has no key for: ranked in their own rows, never the PYTORCH_CUDA_ALLOC_CONF line.
inline bool gpumemprof_only(const std::string& conf) {
  return conf.find("compacting_expandable_segments") != std::string::npos;
}

}  // namespace gpumemprof::tools
