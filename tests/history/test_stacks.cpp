// C++ stacks: a captured frame names this file and the line of the call (which catches
// Boost.Stacktrace's silent fallback to addresses only), the cached unwinder reports exactly
// what libgcc's does, and stacks are bounded, trimmed of the library's frames and shared.
#include <alloca.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "history_util.hpp"

namespace {
const std::string kFile = "test_stacks.cpp";
volatile int sink = 0;

GPUMEMPROF_NOINLINE void* allocate_here(SimAllocator& a, int& line) {
  line = __LINE__ + 1;  // the next line
  void* p = a.allocate(4096);
  sink = sink + 1;  // not a tail call: this frame stays on the stack
  return p;
}

// A realistic call depth: `depth` frames of our own between the test and the allocator.
GPUMEMPROF_NOINLINE void* allocate_deep(SimAllocator& a, int depth) {
  if (depth == 0) return a.allocate(4096);
  void* p = allocate_deep(a, depth - 1);
  sink = sink + 1;  // not a tail call
  return p;
}
}  // namespace

TEST_CASE("A captured frame names its own source file, function and line") {
  if (!gmp::stacks_available) {
    WARN("built without C++ stack traces (GPUMEMPROF_WITH_STACKTRACE=0): nothing to check");
    return;
  }
  Recorded r;
  auto& a = r.a();
  int line = 0;
  void* p = allocate_here(a, line);
  a.validate();
  const gmp::Snapshot s = gmp::snapshot(a);
  const auto* b = block_at(s, addr(p));
  REQUIRE(b != nullptr);
  REQUIRE(b->frames != nullptr);
  REQUIRE(!b->frames->empty());
  const gmp::Frame& f = b->frames->front();
  INFO("innermost frame: " << f.name << " at " << f.filename << ":" << f.line);
  CHECK(f.filename.find(kFile) != std::string::npos);  // not "??" or an address
  CHECK(f.line == line);
  CHECK(f.name.find("allocate_here") != std::string::npos);
  // The next frame is this test case, a few lines above.
  REQUIRE(b->frames->size() >= 2);
  CHECK((*b->frames)[1].filename.find(kFile) != std::string::npos);
  a.deallocate(p);
  a.validate();
}

TEST_CASE("Stacks start at the caller of the allocator and keep stack_depth frames") {
  if (!gmp::stacks_available) return;
  for (const std::size_t depth : {std::size_t{4}, std::size_t{16}}) {
    Recorded r({.stack_depth = depth});
    auto& a = r.a();
    void* p = allocate_deep(a, 20);
    a.validate();
    const gmp::Snapshot s = gmp::snapshot(a);
    const gmp::Frames& frames = block_at(s, addr(p))->frames;
    REQUIRE(frames != nullptr);
    CHECK(frames->size() == depth);
    for (const gmp::Frame& f : *frames) {
      CHECK_FALSE(gmp::Symbolizer::is_internal(f));
      CHECK(f.name.find("allocate_deep") != std::string::npos);
    }
    a.deallocate(p);
    a.validate();
  }
}

TEST_CASE("Allocations from one call site share one Frames object") {
  if (!gmp::stacks_available) return;
  Recorded r;
  auto& a = r.a();
  std::vector<void*> ps;
  for (int i = 0; i < 5; ++i) {
    ps.push_back(a.allocate(1000 + 512 * static_cast<std::size_t>(i)));
    a.validate();
  }
  const gmp::Snapshot s = gmp::snapshot(a);
  const gmp::Frames& first = block_at(s, addr(ps[0]))->frames;
  REQUIRE(first != nullptr);
  for (void* p : ps) CHECK(block_at(s, addr(p))->frames.get() == first.get());
  // The first allocation came through new-segment paths, the others not: same frames anyway.
  for (const auto& e : only(s.device_traces.at(0), gmp::TraceAction::alloc)) CHECK(e.frames.get() == first.get());
  for (void* p : ps) {
    a.deallocate(p);
    a.validate();
  }
}

TEST_CASE("A free from a thread_local destructor at thread exit is recorded, with its stack") {
  // The thread's unwind cache is destroyed before this object (constructed after it): the
  // capture then takes libgcc's path instead of touching the dead cache.
  struct FreesAtExit {
    SimAllocator* a = nullptr;
    void* p = nullptr;
    ~FreesAtExit() {
      if (p != nullptr) a->deallocate(p);
      sink = sink + 1;  // not a tail call: this frame stays on the stack
    }
  };
  Recorded r;
  auto& a = r.a();
  std::thread t([&a] {
    thread_local FreesAtExit holder;
    holder.a = &a;
    holder.p = a.allocate(1000);  // the first capture on this thread creates its cache
  });
  t.join();
  a.validate();
  const auto frees = only(r.recorder.trace(), gmp::TraceAction::free_requested);
  REQUIRE(frees.size() == 1);
  if (gmp::stacks_available) {
    REQUIRE(frees[0].frames != nullptr);
    std::string stack;
    for (const auto& f : *frees[0].frames) stack += f.name + " at " + f.filename + "\n";
    INFO(stack);
    CHECK(frees[0].frames->front().name.find("FreesAtExit") != std::string::npos);
  }
  CHECK(a.memory_stats().allocation.all().current == 0);
}

TEST_CASE("Symbolizer::is_internal recognizes the library's own functions") {
  const auto internal = [](const char* name) { return gmp::Symbolizer::is_internal(gmp::Frame{"f.hpp", 1, name}); };
  CHECK(
      internal("gpumemprof::v0::CachingAllocator<gpumemprof::v0::SimulatedBackend>::allocate(unsigned long, "
               "gpumemprof::v0::Stream)"));
  CHECK(internal("gpumemprof::v0::tools::ReplayResult gpumemprof::v0::tools::replay<X>(T const&, X&)"));
  CHECK(internal("void* gpumemprof::v0::detail::f<std::vector<int, std::allocator<int> > >(int)"));
  CHECK_FALSE(internal("std::vector<int, gpumemprof::v0::Allocator<int> >::push_back(int const&)"));
  CHECK_FALSE(internal("main"));
  CHECK_FALSE(internal("train_step(Model&)"));
  // The PyTorch bridge's library: its C functions and helpers, with and without line tables.
  const auto in_file = [](const char* file) { return gmp::Symbolizer::is_internal(gmp::Frame{file, 0, "f"}); };
  CHECK(in_file("/src/gpumemprof/build/../python/gpumemprof_torch.cpp"));
  CHECK(in_file("../python/python_frames.cpp"));
  CHECK(in_file("/x/site-packages/gpumemprof_torch/libgpumemprof_torch.so"));
  CHECK_FALSE(in_file("/home/me/python_frames.cpp.bak"));
  CHECK_FALSE(in_file("/home/me/train.cpp"));
}

#if GPUMEMPROF_UNWIND_CACHE
namespace {
int compared = 0;
bool qsort_compared = false;
std::vector<std::string> mismatches;

// The cached walker and libgcc's unwinder, called from the same function, must agree on every
// caller frame (frame 0 differs: two call sites).
GPUMEMPROF_NOINLINE void compare(const char* where) {
  std::uintptr_t fast[64];
  std::uintptr_t slow[64];
  const std::size_t nf = gmp::detail::UnwindCache::local()->capture(fast, 64, 0);
  const std::size_t ns = gmp::detail::unwind_slow(slow, 64, 0);
  ++compared;
  bool same = nf != gmp::detail::UnwindCache::give_up && nf == ns;
  for (std::size_t i = 1; same && i < ns; ++i) same = fast[i] == slow[i];
  if (!same) mismatches.push_back(where);
}
GPUMEMPROF_NOINLINE void recurse(int d) {
  if (d == 0) {
    compare("recursion");
    return;
  }
  recurse(d - 1);
  sink = sink + 1;
}
GPUMEMPROF_NOINLINE void with_alloca(int n) {  // a frame whose CFA is RBP-based
  auto* p = static_cast<volatile char*>(alloca(static_cast<std::size_t>(n)));
  p[0] = 1;
  recurse(3);
  sink = sink + p[0];
}
struct alignas(64) Aligned {
  char c[64];
};
GPUMEMPROF_NOINLINE void realigned() {  // a frame that realigns its stack
  Aligned x{};
  x.c[0] = 1;
  asm volatile("" : : "r"(&x) : "memory");
  compare("realigned stack");
  sink = sink + x.c[3];
}
GPUMEMPROF_NOINLINE void through_libraries() {
  std::function<void()> f = [] { recurse(2); };  // libstdc++ frames
  f();
  int v[3] = {3, 1, 2};
  qsort_compared = false;
  std::qsort(v, 3, sizeof(int), [](const void* x, const void* y) {  // libc frames
    if (!qsort_compared) {
      qsort_compared = true;
      compare("qsort callback");
    }
    return *static_cast<const int*>(x) - *static_cast<const int*>(y);
  });
  try {
    throw 1;
  } catch (int) {
    compare("catch block");
  }
}
}  // namespace

TEST_CASE("The cached unwinder reports exactly the frames libgcc's unwinder reports") {
  for (int round = 0; round < 2; ++round) {  // round 1 runs on a warm cache
    recurse(0);
    recurse(40);
    for (int n : {16, 100, 1000, 37}) with_alloca(n);
    realigned();
    through_libraries();
  }
  CHECK(compared == 2 * 10);
  CHECK(mismatches.empty());
  for (const auto& m : mismatches) INFO("mismatch at " << m);
  CHECK(gmp::detail::UnwindCache::local()->cached_rules() > 10);
}

TEST_CASE("The cached unwinder works on other threads, each with its own cache") {
  int here = -1;
  std::thread t([&here] {
    recurse(5);
    here = static_cast<int>(gmp::detail::UnwindCache::local()->cached_rules());
  });
  t.join();
  CHECK(here > 0);
  CHECK(mismatches.empty());
}
#endif
