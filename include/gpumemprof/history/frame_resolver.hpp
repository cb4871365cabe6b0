// Layer 3: stack ids to frames. FrameResolver turns the ids of one StackTable (stack_table.hpp)
// into the snapshot's shared Frames lists, symbolizing each stack once (stacks.hpp); Python
// frames in a stack (python_frames.hpp) come after its C++ frames and resolve through the host's
// hook.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/history/python_frames.hpp"
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
    const SplitStack split = split_stack(raw);
    auto frames = std::make_shared<std::vector<Frame>>();
    append_cpp(split.cpp, !split.python.empty(), *frames);
    for (std::size_t i = 0; i + 1 < split.python.size(); i += 2) {
      frames->push_back(python_frame(split.python[i] & ~kPythonFrameTag, split.python[i + 1]));
    }
    std::string key;
    for (const Frame& f : *frames) {
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

  // The C++ frames: from the first outside gpumemprof, at most depth_; with Python frames
  // after them, up to the interpreter's own (the Python frames stand in its place).
  void append_cpp(std::span<const std::uintptr_t> raw, bool python_follows, std::vector<Frame>& out) {
    if (raw.empty()) return;
    Symbolizer& sym = Symbolizer::instance();
    std::size_t first = 0;
    while (first < raw.size() && Symbolizer::is_internal(sym.frame(raw[first]))) ++first;
    if (first == raw.size()) first = python_follows ? raw.size() : 0;  // all internal: keep them, unless Python follows
    const std::size_t last = std::min(raw.size(), first + depth_);
    for (std::size_t i = first; i < last; ++i) {
      const Frame& f = sym.frame(raw[i]);
      if (python_follows && is_interpreter_frame(f)) break;
      out.push_back(f);
    }
  }

  Frame python_frame(std::uintptr_t code, std::uintptr_t position) {
    const auto key = std::make_pair(code, position);
    auto it = python_.find(key);
    if (it != python_.end()) return it->second;
    Frame f;
    const PythonFrameHooks* hooks = python_frame_hooks.load(std::memory_order_acquire);
    if (hooks == nullptr || hooks->resolve == nullptr || !hooks->resolve(code, position, f)) {
      f = Frame{"??", position_is_line(position) ? static_cast<std::int64_t>(position_value(position)) : 0,
                "<python frame>"};
    }
    return python_.emplace(key, std::move(f)).first->second;
  }

  const StackTable& table_;
  std::size_t depth_;
  std::vector<Frames> by_id_;
  std::unordered_map<std::string, Frames> by_text_;
  std::map<std::pair<std::uintptr_t, std::uintptr_t>, Frame> python_;  // (code, position) resolved
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
