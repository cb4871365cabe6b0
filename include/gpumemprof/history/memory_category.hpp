// Layer 3: memory categories -- what memory is for (parameters, activations, ...), as
// torch.profiler's memory timeline splits it.
//
//   {
//     auto tag = gmp::memory_category(gmp::category::activation);
//     ... allocations made by this thread here are activations ...
//   }
//
// A scope tags the allocations its thread makes while it is open; scopes nest and the innermost
// wins. The category travels with the block: its history entries (alloc and both frees, even
// when another thread or scope frees it) carry it in PyTorch's `user_metadata` field as
// "category=NAME" (after the thread's own metadata and "; " when both are set), so PyTorch's
// viewer shows it, and category_stats() (category_ledger.hpp) counts its bytes. Any string is
// a category; the seven below are torch.profiler's. Names are interned once per scope (a
// process-wide table, as user metadata): use a bounded vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/thread_category.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/user_metadata.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// torch.profiler's categories (torch.profiler._memory_profiler.Category), in its order.
namespace category {
inline constexpr const char* parameter = "parameter";
inline constexpr const char* optimizer_state = "optimizer_state";
inline constexpr const char* input = "input";
inline constexpr const char* temporary = "temporary";
inline constexpr const char* activation = "activation";
inline constexpr const char* gradient = "gradient";
inline constexpr const char* autograd_detail = "autograd_detail";
}  // namespace category

/// Tags the calling thread's allocations with a category until it ends ("" = untagged).
class [[nodiscard]] MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(std::string_view name) : previous_(detail::thread_memory_category) {
    detail::DefaultCategoryLedgers::instance().enable();  // a flag check after the first scope
    detail::thread_memory_category = detail::MetadataStrings::instance().intern(name);
  }
  ~MemoryCategoryScope() { detail::thread_memory_category = previous_; }
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  std::uint32_t previous_;
};

/// `auto tag = gmp::memory_category("activation");` -- see the header comment.
[[nodiscard]] inline MemoryCategoryScope memory_category(std::string_view name) { return MemoryCategoryScope(name); }

/// The calling thread's innermost category ("" when untagged).
[[nodiscard]] inline std::string current_memory_category() {
  return detail::MetadataStrings::instance().lookup(detail::thread_memory_category);
}

/// How a trace entry's user_metadata carries its category.
inline constexpr std::string_view kCategoryMetadataKey = "category=";

/// The user_metadata of an entry with the thread's `metadata` and the block's `category`.
[[nodiscard]] inline std::string metadata_with_category(std::string_view metadata, std::string_view category) {
  if (category.empty()) return std::string(metadata);
  std::string out(metadata);
  if (!out.empty()) out += "; ";
  out += kCategoryMetadataKey;
  out += category;
  return out;
}

/// The category carried by a trace entry's user_metadata ("" = none: unknown).
[[nodiscard]] inline std::string_view category_of_metadata(std::string_view metadata) {
  for (std::size_t at = metadata.rfind(kCategoryMetadataKey); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : metadata.rfind(kCategoryMetadataKey, at - 1)) {
    if (at == 0 || (at >= 2 && metadata.substr(at - 2, 2) == "; ")) {
      return metadata.substr(at + kCategoryMetadataKey.size());
    }
  }
  return {};
}

GPUMEMPROF_NAMESPACE_END
