// Translation unit B of the ODR test: everything included, one default allocator used.
#include "gpumemprof/gpumemprof.hpp"

const void* odr_b_allocator() { return &gpumemprof::default_allocator("sim:6"); }
long long odr_b_allocate() {
  void* p = gpumemprof::default_allocator("sim:6").allocate(1000);
  gpumemprof::default_allocator("sim:6").deallocate(p);
  return gpumemprof::memory_stats("sim:6").allocation.all().allocated;
}
