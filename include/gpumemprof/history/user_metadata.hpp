// Layer 3: per-thread user metadata attached to history events (PyTorch's user_metadata field
// of a trace entry). Strings are interned once when set, so recording an event copies a 32-bit
// id from a thread_local. Interned strings are kept for the life of the process: set metadata
// from a bounded vocabulary ("forward", "step 3 of epoch 1" is fine; a fresh string per
// allocation is not).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/detail/thread_category.hpp"  // thread_user_metadata

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

/// Process-wide string table: equal strings get one id; id 0 is "".
class MetadataStrings {
 public:
  static MetadataStrings& instance() {
    static auto* table = new MetadataStrings();  // never destroyed: threads may outlive statics
    return *table;
  }

  std::uint32_t intern(std::string_view s) {
    if (s.empty()) return 0;
    std::lock_guard lock(mutex_);
    auto it = ids_.find(std::string(s));
    if (it != ids_.end()) return it->second;
    strings_.emplace_back(s);
    const auto id = static_cast<std::uint32_t>(strings_.size());
    ids_.emplace(strings_.back(), id);
    return id;
  }

  [[nodiscard]] std::string lookup(std::uint32_t id) const {
    if (id == 0) return {};
    std::lock_guard lock(mutex_);
    return id <= strings_.size() ? strings_[id - 1] : std::string();
  }

  /// Strings for many ids under one lock (index = id; unknown ids map to "").
  [[nodiscard]] std::vector<std::string> lookup_all(std::uint32_t max_id) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out(1);
    for (std::uint32_t id = 1; id <= max_id && id <= strings_.size(); ++id) out.push_back(strings_[id - 1]);
    return out;
  }

 private:
  MetadataStrings() = default;
  mutable std::mutex mutex_;
  std::deque<std::string> strings_;  // id - 1 -> string; a deque keeps references stable
  std::unordered_map<std::string, std::uint32_t> ids_;
};

}  // namespace detail

/// Attaches `metadata` to the history events this thread causes from now on ("" clears).
inline void set_user_metadata(std::string_view metadata) {
  detail::thread_user_metadata = detail::MetadataStrings::instance().intern(metadata);
}

/// The calling thread's current user metadata.
[[nodiscard]] inline std::string user_metadata() {
  return detail::MetadataStrings::instance().lookup(detail::thread_user_metadata);
}

/// Sets this thread's user metadata for a scope and restores the previous value at its end.
class [[nodiscard]] UserMetadataScope {
 public:
  explicit UserMetadataScope(std::string_view metadata) : previous_(detail::thread_user_metadata) {
    set_user_metadata(metadata);
  }
  ~UserMetadataScope() { detail::thread_user_metadata = previous_; }
  UserMetadataScope(const UserMetadataScope&) = delete;
  UserMetadataScope& operator=(const UserMetadataScope&) = delete;

 private:
  std::uint32_t previous_;
};

GPUMEMPROF_NAMESPACE_END
