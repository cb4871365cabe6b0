// The standard adapters: Allocator<T> (std::allocator_traits, std::vector) and MemoryResource.
#include <memory>
#include <memory_resource>
#include <numeric>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/memory_resource.hpp"
#include "gpumemprof/allocator/std_allocator.hpp"
#include "gpumemprof/device/host.hpp"
#include "sim_allocator.hpp"

using HostCaching = gmp::CachingAllocator<gmp::HostBackend>;

TEST_CASE("Allocator<T> meets the allocator requirements through allocator_traits") {
  HostCaching caching(gmp::HostBackend{}, gmp::AllocatorConfig{});
  using A = gmp::Allocator<double, double*, HostCaching>;
  using Traits = std::allocator_traits<A>;
  static_assert(std::is_same_v<Traits::value_type, double>);
  static_assert(std::is_same_v<Traits::pointer, double*>);
  static_assert(std::is_same_v<Traits::rebind_alloc<int>, gmp::Allocator<int, int*, HostCaching>>);
  static_assert(Traits::propagate_on_container_move_assignment::value);
  A a(caching);
  double* p = Traits::allocate(a, 100);
  Traits::construct(a, p, 3.5);
  CHECK(*p == 3.5);
  Traits::destroy(a, p);
  Traits::deallocate(a, p, 100);
  gmp::Allocator<int, int*, HostCaching> b(a);  // converting copy
  CHECK(b == a);
  CHECK(Traits::max_size(a) > 0);
  caching.validate();
}

TEST_CASE("std::vector over the host backend holds real memory and shows in the stats") {
  HostCaching caching(gmp::HostBackend{}, gmp::AllocatorConfig{});
  {
    const gmp::Allocator<int, int*, HostCaching> alloc(caching);
    std::vector<int, gmp::Allocator<int, int*, HostCaching>> v(alloc);
    for (int i = 0; i < 100000; ++i) v.push_back(i);
    CHECK(std::accumulate(v.begin(), v.end(), 0LL) == 4999950000LL);
    CHECK(caching.memory_stats().allocation.all().current == 1);
    CHECK(caching.memory_stats().allocation.all().allocated > 10);  // growth reallocations
    caching.validate();
  }
  CHECK(caching.memory_stats().allocation.all().current == 0);
  caching.validate();
}

TEST_CASE("Allocator<T> over the default host allocator") {
  const gmp::Allocator<float> host_alloc(gmp::Device::host());
  std::vector<float, gmp::Allocator<float>> v(host_alloc);
  v.assign(1000, 2.0f);
  CHECK(v[999] == 2.0f);
  CHECK(gmp::memory_allocated("host") >= static_cast<std::int64_t>(1000 * sizeof(float)));
  gmp::default_allocator("host").validate();
}

TEST_CASE("default-constructed Allocator<T> and MemoryResource serve memory the host can touch") {
  const std::int64_t before = gmp::memory_allocated("host");
  {
    std::vector<float, gmp::Allocator<float>> v;  // no device named: host memory, never sim:0
    v.assign(4096, 1.5f);
    CHECK(v[4095] == 1.5f);
    CHECK(&v.get_allocator().caching() == &gmp::default_allocator("host"));
    gmp::MemoryResource mr;
    std::pmr::vector<int> w(&mr);
    w.assign(1000, 7);
    CHECK(w[999] == 7);
    CHECK(mr.is_equal(gmp::MemoryResource(gmp::Device::host())));
    CHECK(gmp::memory_allocated("host") >=
          before + static_cast<std::int64_t>(4096 * sizeof(float) + 1000 * sizeof(int)));
  }
  CHECK(gmp::memory_allocated("host") == before);
  gmp::default_allocator("host").validate();
}

TEST_CASE("MemoryResource works with std::pmr containers") {
  gmp::MemoryResource mr(gmp::Device::host());
  {
    std::pmr::vector<long> v(&mr);
    for (long i = 0; i < 5000; ++i) v.push_back(i);
    CHECK(v[4999] == 4999);
    std::pmr::vector<long> w(v, &mr);
    CHECK(w.size() == 5000);
  }
  CHECK(mr.is_equal(mr));
  gmp::MemoryResource other(gmp::Device::host(), gmp::Stream(7));
  CHECK_FALSE(mr.is_equal(other));
  void* z = mr.allocate(0);  // distinct, non-null
  CHECK(z != nullptr);
  mr.deallocate(z, 0);
  CHECK_THROWS_AS(mr.allocate(64, 4096), std::invalid_argument);
  gmp::default_allocator("host").validate();
}

TEST_CASE("BasicMemoryResource over a simulated allocator counts through the allocator") {
  SimAlloc s;
  gmp::BasicMemoryResource<SimAllocator> mr(s.a);
  void* p = mr.allocate(3000, 256);
  CHECK(s.stats().allocated_bytes.all().current == 3072);
  mr.deallocate(p, 3000, 256);
  s.a.validate();
}
