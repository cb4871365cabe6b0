// Layer 3: stack ids to frames. FrameResolver turns the ids of one StackTable (stack_table.hpp)
// into the snapshot's shared Frames lists, symbolizing each stack once (stacks.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/history/stack_table.hpp"
#include "gpumemprof/history/stacks.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Ids of one StackTable to Frames, for one snapshot. Each id is symbolized once; stacks that
/// read the same once the library's own frames are dropped -- one call site reached through
/// different allocator paths, or a call the compiler duplicated (an unrolled loop) -- share
/// one Frames object, so writers emit it once.
class FrameResolver {
 public:
  FrameResolver(const StackTable& table, std::size_t depth) : table_(table), depth_(depth) {}

  Frames operator()(std::uint32_t id) {
    if (id == StackTable::none || id > table_.size()) return nullptr;
    if (by_id_.size() <= id) by_id_.resize(table_.size() + 1);
    if (by_id_[id] == nullptr) by_id_[id] = resolve(table_.frames(id));
    return by_id_[id];
  }

 private:
  Frames resolve(std::span<const std::uintptr_t> raw) {
    Symbolizer& sym = Symbolizer::instance();
    std::size_t first = 0;
    while (first < raw.size() && Symbolizer::is_internal(sym.frame(raw[first]))) ++first;
    if (first == raw.size()) first = 0;  // all internal (a test of the library itself): keep them
    const std::size_t last = std::min(raw.size(), first + depth_);
    auto frames = std::make_shared<std::vector<Frame>>();
    frames->reserve(last - first);
    std::string key;
    for (std::size_t i = first; i < last; ++i) {
      const Frame& f = sym.frame(raw[i]);
      frames->push_back(f);
      key.append(f.name)
          .append(1, '\0')
          .append(f.filename)
          .append(1, '\0')
          .append(std::to_string(f.line))
          .append(1, '\n');
    }
    Frames& shared = by_text_[key];
    if (shared == nullptr) shared = std::move(frames);
    return shared;
  }

  const StackTable& table_;
  std::size_t depth_;
  std::vector<Frames> by_id_;
  std::unordered_map<std::string, Frames> by_text_;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
