// The building blocks: the event ring keeps the newest entries in order across chunk and
// wrap-around boundaries, and the stack table gives equal stacks one id.
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/history/stack_table.hpp"
#include "gpumemprof/history/trace_ring.hpp"

namespace gmp = gpumemprof;
using gmp::detail::RawTraceEntry;
using gmp::detail::TraceRing;

namespace {
std::vector<std::uint64_t> contents(const TraceRing& r) {
  std::vector<std::uint64_t> out;
  r.for_each([&out](const RawTraceEntry& e) { out.push_back(e.addr); });
  return out;
}
std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}
}  // namespace

TEST_CASE("The ring keeps the newest `capacity` entries, oldest first") {
  for (const std::size_t cap :
       {std::size_t{1}, std::size_t{5}, std::size_t{4096}, std::size_t{5000}, std::size_t{9000}}) {
    TraceRing r(cap);
    for (const std::size_t n : {std::size_t{0}, cap - 1, cap, cap + 1, 3 * cap + 7}) {
      r.reset(cap);
      for (std::uint64_t i = 0; i < n; ++i) r.push({.addr = i});
      INFO("capacity " << cap << ", pushed " << n);
      const std::size_t kept = std::min(n, cap);
      CHECK(r.size() == kept);
      CHECK(r.dropped() == n - kept);
      CHECK(contents(r) == range(n - kept, n));
    }
  }
}

TEST_CASE("An unbounded ring grows chunk by chunk and drops nothing") {
  TraceRing r(~std::size_t{0});
  for (std::uint64_t i = 0; i < 3 * TraceRing::max_chunk + 11; ++i) r.push({.addr = i});
  CHECK(r.size() == 3 * TraceRing::max_chunk + 11);
  CHECK(r.dropped() == 0);
  CHECK(contents(r) == range(0, 3 * TraceRing::max_chunk + 11));
}

TEST_CASE("Changing the capacity keeps the newest entries") {
  TraceRing r(100);
  for (std::uint64_t i = 0; i < 250; ++i) r.push({.addr = i});
  r.set_capacity(10);
  CHECK(contents(r) == range(240, 250));
  CHECK(r.dropped() == 240);
  r.push({.addr = 250});
  CHECK(contents(r) == range(241, 251));
  CHECK(r.dropped() == 241);
  r.set_capacity(10000);
  CHECK(contents(r) == range(241, 251));
  for (std::uint64_t i = 251; i < 300; ++i) r.push({.addr = i});
  CHECK(contents(r) == range(241, 300));
  CHECK(r.dropped() == 241);
}

TEST_CASE("The stack table gives equal stacks one id and keeps their frames") {
  gmp::detail::StackTable t;
  const std::uintptr_t a[] = {1, 2, 3};
  const std::uintptr_t b[] = {1, 2, 4};
  const std::uintptr_t c[] = {1, 2};
  CHECK(t.intern(a, 0) == gmp::detail::StackTable::none);
  const auto ia = t.intern(a, 3);
  const auto ib = t.intern(b, 3);
  const auto ic = t.intern(c, 2);
  CHECK(ia != ib);
  CHECK(ia != ic);
  CHECK(t.intern(a, 3) == ia);
  CHECK(t.intern(c, 2) == ic);
  const auto fb = t.frames(ib);
  CHECK(std::vector<std::uintptr_t>(fb.begin(), fb.end()) == std::vector<std::uintptr_t>{1, 2, 4});
  // Growth past the first table keeps every id.
  std::vector<std::uint32_t> ids;
  for (std::uintptr_t i = 0; i < 5000; ++i) {
    const std::uintptr_t s[] = {i, i * 7, 42};
    ids.push_back(t.intern(s, 3));
  }
  for (std::uintptr_t i = 0; i < 5000; ++i) {
    const std::uintptr_t s[] = {i, i * 7, 42};
    CHECK(t.intern(s, 3) == ids[i]);
  }
  CHECK(t.size() == 3 + 5000);
  t.clear();
  CHECK(t.size() == 0);
  CHECK(t.intern(a, 3) == 1);
}
