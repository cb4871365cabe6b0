// Scope hooks: every profiled scope calls the registered hooks' enter and exit, with the
// token enter returned and the finished result, in LIFO order; registration is bounded.
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/scope_hooks.hpp"
#include "profiler_test_util.hpp"

namespace {

struct Counter {
  std::vector<std::string> log;
  std::uint64_t next_token = 100;
  std::int64_t last_allocated = -1;
  bool tokens_match = true;
  std::vector<std::uint64_t> open;

  static std::uint64_t enter(void* user, const char* name) noexcept {
    auto& c = *static_cast<Counter*>(user);
    c.log.push_back(std::string("enter ") + name);
    c.open.push_back(c.next_token);
    return c.next_token++;
  }
  static void exit(void* user, std::uint64_t token, const gmp::ProfileResult& r) noexcept {
    auto& c = *static_cast<Counter*>(user);
    c.log.push_back("exit " + r.name);
    c.tokens_match = c.tokens_match && !c.open.empty() && c.open.back() == token;
    if (!c.open.empty()) c.open.pop_back();
    c.last_allocated = r.memory_allocated;
  }
};

/// Registers a hook for one test and removes it after.
struct ScopedHook {
  explicit ScopedHook(Counter& c) : hook{&Counter::enter, &Counter::exit, &c}, slot(gmp::register_scope_hook(&hook)) {}
  ~ScopedHook() { gmp::unregister_scope_hook(slot); }
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;
  gmp::ScopeHook hook;
  std::size_t slot;
};

}  // namespace

TEST_CASE("scope hooks: enter and exit around every scope, nested in LIFO order") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  Counter c;
  const std::size_t before = gmp::scope_hook_count();
  {
    ScopedHook registered(c);
    CHECK(gmp::scope_hook_count() == before + 1);
    {
      auto outer = profiler.profile_context("outer");
      profiler.profile_function("inner", [&] { d.free(d.alloc(2 * MiB)); });
    }
    CHECK(c.last_allocated == 2 * iMiB);  // exit sees the finished result
    CHECK_THROWS(profiler.profile_function("throws", [] { throw std::runtime_error("x"); }));
  }
  CHECK(gmp::scope_hook_count() == before);
  CHECK(c.log == std::vector<std::string>{"enter outer", "enter inner", "exit inner", "exit outer", "enter throws",
                                          "exit throws"});
  CHECK(c.tokens_match);
  profiler.profile_function("after", [] {});
  CHECK(c.log.size() == 6);  // unregistered: not called any more
}

TEST_CASE("scope hooks: a scope open when its hook is removed still calls exit") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  Counter c;
  gmp::ScopeHook hook{&Counter::enter, &Counter::exit, &c};
  const std::size_t slot = gmp::register_scope_hook(&hook);
  {
    auto scope = profiler.profile_context("open");
    gmp::unregister_scope_hook(slot);
  }
  CHECK(c.log == std::vector<std::string>{"enter open", "exit open"});
  gmp::unregister_scope_hook(slot);  // twice: ignored
}

TEST_CASE("scope hooks: at most eight, and null hooks are refused") {
  Counter c;
  gmp::ScopeHook hook{&Counter::enter, &Counter::exit, &c};
  std::vector<std::size_t> slots;
  const std::size_t free_slots = 8 - gmp::scope_hook_count();
  for (std::size_t i = 0; i < free_slots; ++i) slots.push_back(gmp::register_scope_hook(&hook));
  CHECK_THROWS_AS(gmp::register_scope_hook(&hook), std::length_error);
  for (auto s : slots) gmp::unregister_scope_hook(s);
  CHECK_THROWS_AS(gmp::register_scope_hook(nullptr), std::invalid_argument);
}
