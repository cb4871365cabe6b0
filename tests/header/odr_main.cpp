// Two translation units that include every header link into one program and share the
// library's process-wide state (inline variables and function-local statics).
#include <cstdio>

const void* odr_a_allocator();
const void* odr_b_allocator();
long long odr_a_allocate();
long long odr_b_allocate();

int main() {
  if (odr_a_allocator() != odr_b_allocator()) {
    std::puts("FAIL: the two translation units see different default allocators");
    return 1;
  }
  const long long a = odr_a_allocate();
  const long long b = odr_b_allocate();
  if (a != 1 || b != 2) {
    std::printf("FAIL: expected 1 then 2 allocations counted, got %lld and %lld\n", a, b);
    return 1;
  }
  std::puts("ok: one library state across translation units");
  return 0;
}
