// The standard adapters: Allocator<T> (std::allocator_traits, std::vector) and MemoryResource.
#include <algorithm>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <memory_resource>
#include <numeric>
#include <string>
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

// Code written for a GPU that touches device memory from the host runs on a simulated device.
TEST_CASE("std containers on sim:N hold memory the host can touch, counted as device memory") {
  const std::int64_t before = gmp::memory_allocated("sim:1");
  {
    std::vector<float, gmp::Allocator<float>> v(1000, 1.0f, gmp::Allocator<float>("sim:1"));
    CHECK(v[999] == 1.0f);
    CHECK(gmp::memory_allocated("sim:1") == before + 4096);  // 4000 bytes in a 4 KiB block
    v.resize(100000, 2.0f);
    CHECK(v[99999] == 2.0f);
    using Key = std::pair<const int, std::string>;
    std::map<int, std::string, std::less<>, gmp::Allocator<Key>> m(gmp::Allocator<Key>("sim:1"));
    for (int i = 0; i < 200; ++i) m.emplace(i, std::to_string(i));
    CHECK(m.at(199) == "199");
    std::deque<int, gmp::Allocator<int>> d(gmp::Allocator<int>("sim:1"));
    std::list<int, gmp::Allocator<int>> l(gmp::Allocator<int>("sim:1"));
    for (int i = 0; i < 10000; ++i) {
      d.push_front(i);
      l.push_back(i);
    }
    CHECK(d.front() == 9999);
    CHECK(l.back() == 9999);
    CHECK(gmp::memory_stats("sim:1").allocation.all().current > 200);
    gmp::default_allocator("sim:1").validate();
  }
  CHECK(gmp::memory_allocated("sim:1") == before);
  gmp::default_allocator("sim:1").validate();
}

TEST_CASE("std::pmr containers over a MemoryResource on sim:N") {
  gmp::MemoryResource mr(gmp::Device::sim(2));
  const std::int64_t before = gmp::memory_allocated("sim:2");
  {
    std::pmr::vector<double> v(50000, 0.5, &mr);
    std::pmr::string s(1000, 'x', &mr);
    std::pmr::map<int, std::pmr::vector<int>> m(&mr);
    for (int i = 0; i < 100; ++i) m[i].assign(100, i);
    CHECK(v[49999] == 0.5);
    CHECK(s[999] == 'x');
    CHECK(m[99][99] == 99);
    CHECK(gmp::memory_allocated("sim:2") >= before + static_cast<std::int64_t>(50000 * sizeof(double)));
  }
  CHECK(gmp::memory_allocated("sim:2") == before);
  gmp::default_allocator("sim:2").validate();
}

TEST_CASE("thrust-like algorithms over a device vector on sim:N") {
  using DeviceVector = std::vector<float, gmp::Allocator<float>>;
  const gmp::Allocator<float> on_device("sim:1");
  const std::int64_t large_before = gmp::memory_stats("sim:1").allocated_bytes[gmp::StatPool::large_pool].current;
  DeviceVector x(1 << 20, 0.0f, on_device);  // 4 MiB: a large-pool block
  std::iota(x.begin(), x.end(), 0.0f);
  DeviceVector y(x.size(), 0.0f, on_device);
  std::transform(x.begin(), x.end(), y.begin(), [](float v) { return 2.0f * v + 1.0f; });  // saxpy-like
  const double sum = std::reduce(y.begin(), y.end(), 0.0, std::plus<>());
  const double n = static_cast<double>(x.size());
  CHECK(sum == n * n);  // sum of 2i + 1 for i < n
  CHECK(gmp::memory_stats("sim:1").allocated_bytes[gmp::StatPool::large_pool].current ==
        large_before + static_cast<std::int64_t>(2 * (4u << 20)));
  DeviceVector z(y, on_device);
  std::sort(z.begin(), z.end(), std::greater<>());
  CHECK(z.front() == y.back());
  gmp::default_allocator("sim:1").validate();
}
