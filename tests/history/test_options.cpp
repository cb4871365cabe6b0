// HistoryOptions: PyTorch's defaults, designated initializers, and PyTorch's strings.
#include <limits>

#include "catch.hpp"
#include "gpumemprof/history/history_options.hpp"

namespace gmp = gpumemprof;

TEST_CASE("HistoryOptions defaults are PyTorch's: record everything, unbounded") {
  const gmp::HistoryOptions o;
  CHECK(o.enabled == gmp::HistoryEnabled::all);
  CHECK(o.context == gmp::HistoryContext::all);
  CHECK(o.stacks == gmp::HistoryStacks::cpp);
  CHECK(o.max_entries == std::numeric_limits<std::size_t>::max());
  CHECK(o.stack_depth == 16);
  CHECK_FALSE(o.clear_history);
}

TEST_CASE("HistoryOptions takes designated initializers") {
  const gmp::HistoryOptions o{.enabled = gmp::HistoryEnabled::state,
                              .context = gmp::HistoryContext::alloc,
                              .stacks = gmp::HistoryStacks::none,
                              .max_entries = 42};
  CHECK(o.enabled == gmp::HistoryEnabled::state);
  CHECK(o.context == gmp::HistoryContext::alloc);
  CHECK(o.stacks == gmp::HistoryStacks::none);
  CHECK(o.max_entries == 42);
}

TEST_CASE("PyTorch's option strings parse, and print back") {
  CHECK(gmp::parse_history_enabled("all") == gmp::HistoryEnabled::all);
  CHECK(gmp::parse_history_enabled("state") == gmp::HistoryEnabled::state);
  CHECK(gmp::parse_history_enabled("None") == gmp::HistoryEnabled::off);
  CHECK(gmp::parse_history_enabled("") == gmp::HistoryEnabled::off);
  CHECK(gmp::parse_history_context("state") == gmp::HistoryContext::state);
  CHECK(gmp::parse_history_context("alloc") == gmp::HistoryContext::alloc);
  CHECK(gmp::parse_history_context("all") == gmp::HistoryContext::all);
  CHECK(gmp::parse_history_context("none") == gmp::HistoryContext::none);
  // PyTorch's Python and mixed stacks (C++ frames where no interpreter hooks in: test_python_frames.cpp).
  CHECK(gmp::parse_history_stacks("python") == gmp::HistoryStacks::python);
  CHECK(gmp::parse_history_stacks("all") == gmp::HistoryStacks::all);
  CHECK(gmp::parse_history_stacks("cpp") == gmp::HistoryStacks::cpp);
  CHECK(gmp::parse_history_stacks("none") == gmp::HistoryStacks::none);
  for (auto s :
       {gmp::HistoryStacks::none, gmp::HistoryStacks::cpp, gmp::HistoryStacks::python, gmp::HistoryStacks::all}) {
    CHECK(gmp::parse_history_stacks(gmp::to_string(s)) == s);
  }
  for (auto e : {gmp::HistoryEnabled::off, gmp::HistoryEnabled::state, gmp::HistoryEnabled::all}) {
    CHECK(gmp::parse_history_enabled(gmp::to_string(e)) == e);
  }
  for (auto c :
       {gmp::HistoryContext::none, gmp::HistoryContext::state, gmp::HistoryContext::alloc, gmp::HistoryContext::all}) {
    CHECK(gmp::parse_history_context(gmp::to_string(c)) == c);
  }
}

TEST_CASE("A bad option string is a ConfigError naming the option, the value and the choices") {
  try {
    (void)gmp::parse_history_context("everything");
    FAIL("no exception");
  } catch (const gmp::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("context") != std::string::npos);
    CHECK(what.find("everything") != std::string::npos);
    CHECK(what.find("alloc") != std::string::npos);
  }
  CHECK_THROWS_AS(gmp::parse_history_enabled("yes"), std::invalid_argument);
  CHECK_THROWS_AS(gmp::parse_history_stacks("java"), gmp::ConfigError);
}
