// Layer 3: what to record, in the words of torch.cuda.memory._record_memory_history.
//
//   enabled  off   -- record nothing; turning history off detaches the recorder and clears it
//            state -- keep stacks of live blocks only; the event trace is a ring of 1
//            all   -- also keep the newest `max_entries` events
//   context  none  -- no stacks anywhere
//            state -- a stack per live block and segment (snapshot frames), none on events
//            alloc -- also on events: alloc/segment_alloc carry the allocating stack, frees the
//                     stack of the allocation they free
//            all   -- also capture a stack when a block is freed (and at segment_free)
//   stacks   none   -- no frames
//            cpp    -- C++ frames
//            python -- the calling thread's Python frames (file, line, function), as PyTorch's
//                      "python"; threads running no Python code (autograd's) get none. Where no
//                      Python frame hooks are installed (python_frames.hpp: a program without
//                      an interpreter) it means C++ frames.
//            all    -- C++ frames, then the Python frames (PyTorch's "all")
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class HistoryEnabled : std::uint8_t { off, state, all };
enum class HistoryContext : std::uint8_t { none, state, alloc, all };
enum class HistoryStacks : std::uint8_t { none, cpp, python, all };

/// Options of record_memory_history(); the defaults are PyTorch's (record everything, unbounded).
struct HistoryOptions {
  HistoryEnabled enabled = HistoryEnabled::all;
  HistoryContext context = HistoryContext::all;
  HistoryStacks stacks = HistoryStacks::cpp;
  /// Events kept with enabled=all (the newest win); enabled=state keeps 1.
  std::size_t max_entries = std::numeric_limits<std::size_t>::max();
  /// Frames kept per stack, innermost first, not counting the allocator's own frames.
  std::size_t stack_depth = 16;
  /// Drop the events recorded so far (stacks of live blocks stay) when applying these options.
  bool clear_history = false;
};

namespace detail {
[[noreturn]] inline void bad_history_option(std::string_view option, std::string_view value, std::string_view choices) {
  throw ConfigError("record_memory_history: " + std::string(option) + " must be " + std::string(choices) + ", got \"" +
                    std::string(value) + "\"");
}
inline bool is_none_word(std::string_view s) { return s.empty() || s == "none" || s == "None" || s == "off"; }
}  // namespace detail

/// "state", "all", or "none"/"None"/"off"/"" (PyTorch's None). Throws ConfigError.
[[nodiscard]] inline HistoryEnabled parse_history_enabled(std::string_view s) {
  if (detail::is_none_word(s)) return HistoryEnabled::off;
  if (s == "state") return HistoryEnabled::state;
  if (s == "all") return HistoryEnabled::all;
  detail::bad_history_option("enabled", s, "\"state\", \"all\" or \"none\"");
}

/// "state", "alloc", "all", or "none"/"None"/"". Throws ConfigError.
[[nodiscard]] inline HistoryContext parse_history_context(std::string_view s) {
  if (detail::is_none_word(s)) return HistoryContext::none;
  if (s == "state") return HistoryContext::state;
  if (s == "alloc") return HistoryContext::alloc;
  if (s == "all") return HistoryContext::all;
  detail::bad_history_option("context", s, "\"state\", \"alloc\", \"all\" or \"none\"");
}

/// "cpp"/"c++", PyTorch's "python" and "all", or "none". Throws ConfigError.
[[nodiscard]] inline HistoryStacks parse_history_stacks(std::string_view s) {
  if (detail::is_none_word(s)) return HistoryStacks::none;
  if (s == "cpp" || s == "c++") return HistoryStacks::cpp;
  if (s == "python") return HistoryStacks::python;
  if (s == "all") return HistoryStacks::all;
  detail::bad_history_option("stacks", s, "\"cpp\", \"python\", \"all\" or \"none\"");
}

[[nodiscard]] constexpr const char* to_string(HistoryEnabled e) noexcept {
  switch (e) {
    case HistoryEnabled::off: return "none";
    case HistoryEnabled::state: return "state";
    case HistoryEnabled::all: return "all";
  }
  return "none";
}
[[nodiscard]] constexpr const char* to_string(HistoryContext c) noexcept {
  switch (c) {
    case HistoryContext::none: return "none";
    case HistoryContext::state: return "state";
    case HistoryContext::alloc: return "alloc";
    case HistoryContext::all: return "all";
  }
  return "none";
}
[[nodiscard]] constexpr const char* to_string(HistoryStacks s) noexcept {
  switch (s) {
    case HistoryStacks::none: return "none";
    case HistoryStacks::cpp: return "cpp";
    case HistoryStacks::python: return "python";
    case HistoryStacks::all: return "all";
  }
  return "none";
}

GPUMEMPROF_NAMESPACE_END
