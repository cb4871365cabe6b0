// A program built without C++ stacks (as with plain `g++ -I include`) is told once, on stderr,
// when history asks for stacks it cannot capture. Its own executable: this file alone builds
// with GPUMEMPROF_WITH_STACKTRACE=0.
#undef GPUMEMPROF_WITH_STACKTRACE
#define GPUMEMPROF_WITH_STACKTRACE 0
#undef BOOST_STACKTRACE_LINK

#include <unistd.h>

#include <cstdio>
#include <string>

#include "catch.hpp"
#include "gpumemprof/history/history_recorder.hpp"

namespace gmp = gpumemprof;

namespace {
/// What `f` writes to stderr (file descriptor 2).
template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  std::FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  const int saved = ::dup(2);
  ::dup2(::fileno(capture), 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::rewind(capture);
  std::string text;
  for (int c; (c = std::fgetc(capture)) != EOF;) text += static_cast<char>(c);
  std::fclose(capture);
  return text;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("history with C++ stacks in a build without them warns once, naming the flags") {
  static_assert(!gmp::stacks_available);
  const std::string without = stderr_of([] {
    gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all, .stacks = gmp::HistoryStacks::none}, "sim:0");
    gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:0");
  });
  CHECK(without.empty());  // no stacks asked for: nothing to say
  const std::string with = stderr_of([] {
    gmp::record_memory_history({}, "sim:0");  // PyTorch's defaults: stacks on
    gmp::record_memory_history("all", "all", "python", 100, "sim:1");
    gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:0");
  });
  CHECK(count(with, "gpumemprof: allocation history records no C++ stacks") == 1);
  CHECK(with.find("-DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK") != std::string::npos);
  CHECK(with.find("-lboost_stacktrace_backtrace -ldl") != std::string::npos);
}
