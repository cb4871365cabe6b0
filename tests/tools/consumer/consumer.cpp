// A minimal consumer of an installed (or subproject) gpumemprof: the build flags must bring C++20,
// the feature macros and the libraries the headers need, with nothing added by hand.
#include <cstdio>

#include <gpumemprof/gpumemprof.hpp>

int main() {
  namespace gmp = gpumemprof;
  using namespace gmp::literals;
  gmp::record_memory_history({}, "sim:0");
  auto& alloc = gmp::default_allocator("sim:0");
  void* p = alloc.allocate(64_MiB);
  const auto allocated = gmp::memory_allocated("sim:0");
  alloc.deallocate(p);
  alloc.validate();
  std::printf("consumer: %s allocated, C++ stacks %s\n",
              gmp::format_size(static_cast<std::uint64_t>(allocated)).c_str(),
              GPUMEMPROF_WITH_STACKTRACE ? "on" : "off");
  return allocated == static_cast<std::int64_t>(64_MiB) ? 0 : 1;
}
