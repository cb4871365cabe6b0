// Stream capture (CUDA graphs) on the simulated device: the device fails every call that capture
// forbids (as a GPU does), so these tests show the allocator never makes one -- new segments in
// relaxed mode, no events on capturing streams, frees of cross-stream blocks deferred until the
// capture ends, no emptying or waiting during capture -- and that routed allocations take the
// capture's private pool.
#include <stdexcept>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/allocator/mem_pool.hpp"
#include "sim_allocator.hpp"

namespace {
const gmp::Stream s1{1};
const gmp::Stream s2{2};

}  // namespace

TEST_CASE("capture: the simulated device forbids what CUDA forbids during capture") {
  gmp::SimulatedBackend sim(gmp::SimulatedOptions{1 * GiB});
  void* before = sim.malloc(2 * MiB);
  const gmp::Event e = sim.record_event(s1);
  sim.begin_capture(s1);  // global mode
  CHECK(sim.is_capturing(s1));
  CHECK_FALSE(sim.is_capturing(s2));
  CHECK_THROWS_AS(sim.malloc(2 * MiB), gmp::DeviceRuntimeError);  // cudaMalloc may synchronize
  CHECK_THROWS_AS(sim.record_event(s1), gmp::DeviceRuntimeError);
  CHECK_THROWS_AS(sim.query_event(e), gmp::DeviceRuntimeError);
  CHECK_THROWS_AS(sim.synchronize_stream(s1), gmp::DeviceRuntimeError);
  // Another thread in global mode may not malloc either; in relaxed mode it may.
  std::thread([&] {
    CHECK_THROWS_AS(sim.malloc(2 * MiB), gmp::DeviceRuntimeError);
    sim.exchange_capture_mode(gmp::CaptureMode::relaxed);
    void* p = sim.malloc(2 * MiB);
    CHECK(p != nullptr);
    sim.free(p);
  }).join();
  CHECK(sim.counters().capture_violations == 5);
  CHECK_FALSE(sim.end_capture(s1));  // invalidated
  // A capture in per-thread mode forbids nothing to other threads.
  sim.begin_capture(s2, gmp::CaptureMode::per_thread);
  std::thread([&] { sim.free(before); }).join();
  CHECK(sim.end_capture(s2));
}

TEST_CASE("capture: allocations and frees inside a capture take the graph's pool, legally") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  void* eager = a.allocate(1 * MiB, s1);  // a default-pool segment on s1, from before
  a.deallocate(eager);
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  CHECK(graph.first > 0);
  CHECK(graph.second == 0);
  a.create_pool(graph);  // the graph's own reference, until the graph is destroyed
  std::vector<void*> kept;
  {
    gmp::AllocateToPool route(a, graph, s1);
    sa.sim().begin_capture(s1);
    void* t1 = a.allocate(3 * MiB, s1);     // a new segment, in relaxed mode
    void* t2 = a.allocate(100 * 1024, s1);  // small pool: another new segment
    CHECK(pool_of(a, t1) == graph);
    CHECK(pool_of(a, t2) == graph);
    CHECK(addr(t2) != addr(eager));  // the default pool's cached block is not the graph's
    a.deallocate(t1);                // freed inside the capture: reused by it
    void* t3 = a.allocate(3 * MiB, s1);
    CHECK(t3 == t1);
    void* other = a.allocate(1 * MiB, s2);  // another stream, not routed: default pool
    CHECK(pool_of(a, other).is_default());
    a.deallocate(other);
    a.empty_cache();  // does nothing while a capture is under way
    CHECK(sa.stats().num_sync_all_streams == 0);
    a.validate();
    kept = {t2, t3};
    CHECK(sa.sim().end_capture(s1));
  }
  CHECK(sa.sim().counters().capture_violations == 0);
  // After the capture the graph's pool keeps its memory: empty_cache leaves it alone.
  const auto reserved_before = sa.stats().reserved_bytes.all().current;
  a.empty_cache();
  const auto stats = a.pool_stats(graph);
  REQUIRE(stats);
  CHECK(stats->segments == 2);
  CHECK(stats->allocations == 2);
  CHECK(sa.stats().reserved_bytes.all().current == reserved_before - static_cast<std::int64_t>(4 * MiB));
  for (void* p : kept) a.deallocate(p);
  a.empty_cache();
  CHECK(a.pool_stats(graph)->reserved_bytes == stats->reserved_bytes);  // still the graph's
  a.validate();
  // The graph is destroyed: its pool goes, with its memory.
  a.release_pool(graph);
  CHECK_FALSE(a.pool_stats(graph));
  CHECK(sa.stats().reserved_bytes.all().current == 0);
  a.validate();
}

TEST_CASE("capture: two streams of one capture share its pool; a second graph can share it too") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  a.create_pool(graph);
  {
    gmp::AllocateToPool route(a, graph, [](gmp::Stream s) { return s == s1 || s == s2; });
    sa.sim().begin_capture(s1);
    sa.sim().begin_capture(s2);  // joined into the capture (cudaStreamWaitEvent on an event of s1)
    void* x = a.allocate(4 * MiB, s1);
    void* y = a.allocate(4 * MiB, s2);
    CHECK(pool_of(a, x) == graph);
    CHECK(pool_of(a, y) == graph);
    a.deallocate(y);
    a.deallocate(x);
    a.validate();
    CHECK(sa.sim().end_capture(s2));
    CHECK(sa.sim().end_capture(s1));
  }
  CHECK(a.pool_stats(graph)->segments == 2);  // each stream's blocks: one segment each
  CHECK(sa.sim().counters().capture_violations == 0);
  a.release_pool(graph);
  CHECK(sa.stats().reserved_bytes.all().current == 0);
}

TEST_CASE("capture: a cross-stream block freed during capture waits for the capture's end") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  void* p = a.allocate(8 * MiB, s1);
  a.record_stream(p, s2);
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  const auto recorded = sa.sim().counters().events_recorded;
  {
    gmp::AllocateToPool route(a, graph, s2);
    sa.sim().begin_capture(s2);
    a.deallocate(p);  // no event on the capturing stream: deferred
    CHECK(sa.sim().counters().events_recorded == recorded);
    void* q = a.allocate(8 * MiB, s1);  // s1 is not routed; p is still pending
    CHECK(q != p);
    a.deallocate(q);
    a.validate();
    CHECK(sa.sim().end_capture(s2));
  }
  CHECK(sa.sim().counters().capture_violations == 0);
  // The next slow allocation records the events; once s2's work is done, p is reused.
  void* r = a.allocate(30 * MiB, s1);
  CHECK(sa.sim().counters().events_recorded == recorded + 1);
  sa.sim().complete_events(s2);
  a.deallocate(r);
  void* again = a.allocate(8 * MiB, s1);
  CHECK(again == p);
  a.deallocate(again);
  a.validate();
}

TEST_CASE("capture: without a route, a capture on a stream is still never broken") {
  // A user who captures with cudaStreamBeginCapture alone: the allocator asks the device.
  SECTION("default segments") {
    SimAlloc sa("", 1 * GiB);
    auto& a = sa.a;
    void* cached = a.allocate(64 * MiB, s1);
    a.deallocate(cached);
    void* live = a.allocate(8 * MiB, s2);
    a.record_stream(live, s1);
    sa.sim().begin_capture(s1);
    void* p = a.allocate(100 * MiB, s1);  // a new segment: relaxed mode
    a.deallocate(live);                   // s1 captures: deferred, no event on it
    a.empty_cache();                      // a segment's stream captures: nothing freed, no wait
    CHECK(sa.stats().num_device_free == 0);
    // Out of memory during capture: the OOM sequence does not wait or empty the cache.
    CHECK_THROWS_AS(a.allocate(2 * GiB, s1), gmp::OutOfMemoryError);
    a.validate();
    CHECK(sa.sim().end_capture(s1));
    a.deallocate(p);
    a.empty_cache();
    CHECK(sa.stats().reserved_bytes.all().current == 0);
    a.validate();
    CHECK(sa.sim().counters().capture_violations == 0);
  }
  SECTION("expandable segments") {
    SimAlloc sa("expandable_segments:True", 1 * GiB);
    auto& a = sa.a;
    sa.sim().begin_capture(s1);
    void* p = a.allocate(100 * MiB, s1);  // reserve and map: relaxed mode
    void* q = a.allocate(10 * MiB, s2);
    a.deallocate(q);
    CHECK(sa.sim().end_capture(s1));
    a.deallocate(p);
    a.validate();
    CHECK(sa.sim().counters().capture_violations == 0);
  }
}

TEST_CASE("capture: out of memory inside a routed capture fails cleanly") {
  SimAlloc sa("", 256 * MiB);
  auto& a = sa.a;
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  a.create_pool(graph);
  {
    gmp::AllocateToPool route(a, graph, s1);
    sa.sim().begin_capture(s1);
    void* p = a.allocate(200 * MiB, s1);
    CHECK_THROWS_AS(a.allocate(200 * MiB, s1), gmp::OutOfMemoryError);
    a.deallocate(p);
    a.validate();
    CHECK(sa.sim().end_capture(s1));
  }
  CHECK(sa.stats().num_alloc_retries == 0);  // no wait-and-empty retry during capture
  CHECK(sa.sim().counters().capture_violations == 0);
  a.release_pool(graph);
  CHECK(sa.stats().reserved_bytes.all().current == 0);
  a.validate();
}

TEST_CASE("capture: a deferred free whose only other stream is released is freed at once after") {
  SimAlloc sa("", 1 * GiB);
  auto& a = sa.a;
  const gmp::Stream s3{3};
  void* p = a.allocate(8 * MiB, s1);
  a.record_stream(p, s3);
  sa.sim().begin_capture(s1);
  a.deallocate(p);  // s1 captures: deferred
  a.validate();
  CHECK(sa.sim().end_capture(s1));
  a.release_stream(s3);  // its work is done: p no longer waits for it
  a.validate();
  void* q = a.allocate(8 * MiB, s1);  // the deferral is resolved: p's block is free again
  CHECK(q == p);
  a.deallocate(q);
  a.validate();
  CHECK(sa.sim().counters().capture_violations == 0);
}

// c10 2.11 (graph_capture_record_stream_reuse:False, its default): a block freed during a capture
// without uses on other streams is free at once, so the capture's later allocations on its stream
// reuse it; one used on other streams waits until no capture is under way, and then gets events
// only on the streams recorded before the capture (the ones recorded during it ran graph work).
TEST_CASE("capture: reuse of blocks freed during a capture, as c10 2.11") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  const gmp::Stream s3{3};
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  a.create_pool(graph);
  SECTION("no other-stream use: the next allocation of its size in the capture reuses it") {
    gmp::AllocateToPool route(a, graph, s1);
    sa.sim().begin_capture(s1);
    void* x = a.allocate(8 * MiB, s1);
    a.deallocate(x);
    void* y = a.allocate(8 * MiB, s1);
    CHECK(y == x);
    a.deallocate(y);
    CHECK(a.pool_stats(graph)->segments == 1);
    CHECK(sa.sim().end_capture(s1));
  }
  SECTION("used on a stream joined into the capture: not reused in it, free without an event after it") {
    void* x = nullptr;
    {
      gmp::AllocateToPool route(a, graph, [](gmp::Stream s) { return s == s1 || s == s2; });
      sa.sim().begin_capture(s1);
      sa.sim().begin_capture(s2);
      x = a.allocate(8 * MiB, s1);
      a.record_stream(x, s2);  // during the capture: graph work
      a.deallocate(x);         // deferred until no capture is under way
      void* y = a.allocate(8 * MiB, s1);
      CHECK(y != x);
      a.deallocate(y);
      a.validate();
      CHECK(sa.sim().end_capture(s2));
      CHECK(sa.sim().end_capture(s1));
    }
    CHECK(a.pool_stats(graph)->active_bytes == static_cast<std::int64_t>(8 * MiB));  // x, pending
    const auto recorded = sa.sim().counters().events_recorded;
    void* z = a.allocate(1 * MiB, s1);                       // the default pool's slow path resolves the deferral
    CHECK(sa.sim().counters().events_recorded == recorded);  // no event on s2
    CHECK(a.pool_stats(graph)->active_bytes == 0);           // x is free again, in the graph's pool
    a.deallocate(z);
  }
  SECTION("used before the capture on one stream and during it on another: one event, before's") {
    void* x = a.allocate(8 * MiB, s1);
    a.record_stream(x, s2);  // eager work on s2
    {
      gmp::AllocateToPool route(a, graph, [s3](gmp::Stream s) { return s == s1 || s == s3; });
      sa.sim().begin_capture(s1);
      sa.sim().begin_capture(s3);
      a.record_stream(x, s3);  // graph work on s3
      a.deallocate(x);
      CHECK(sa.sim().end_capture(s3));
      CHECK(sa.sim().end_capture(s1));
    }
    const auto recorded = sa.sim().counters().events_recorded;
    void* z = a.allocate(1 * MiB, s1);
    CHECK(sa.sim().counters().events_recorded == recorded + 1);  // on s2 only
    sa.sim().complete_events(s2);
    a.deallocate(z);
    void* again = a.allocate(8 * MiB, s1);  // default pool: x's block once s2's event completed
    CHECK(again == x);
    a.deallocate(again);
  }
  SECTION("a use recorded during a capture and freed after it: events on every use, as c10") {
    void* x = a.allocate(8 * MiB, s1);
    {
      gmp::AllocateToPool route(a, graph, s3);
      sa.sim().begin_capture(s3);
      a.record_stream(x, s3);
      CHECK(sa.sim().end_capture(s3));
    }
    const auto recorded = sa.sim().counters().events_recorded;
    a.deallocate(x);  // no capture under way: an event on s3
    CHECK(sa.sim().counters().events_recorded == recorded + 1);
    void* y = a.allocate(8 * MiB, s1);
    CHECK(y != x);
    sa.sim().complete_events(s3);
    a.deallocate(y);
  }
  a.validate();
  CHECK(sa.sim().counters().capture_violations == 0);
  a.release_pool(graph);
  a.empty_cache();
  CHECK(sa.stats().reserved_bytes.all().current == 0);
  a.validate();
}

// A graph's pool when the graph is destroyed (release_pool, what ~CUDAGraph does through
// releasePool): its cached segments go back to the device at once; segments holding tensors the
// graph's capture allocated and the user still holds (its outputs) stay, in the pool, until those
// are freed; a pool shared by another graph keeps everything; during another capture nothing goes
// back until no capture is under way.
TEST_CASE("capture: the pool of a destroyed graph") {
  SimAlloc sa("", 4 * GiB);
  auto& a = sa.a;
  const gmp::MempoolId graph = gmp::graph_pool_handle();
  a.create_pool(graph);
  void* output = nullptr;
  {
    gmp::AllocateToPool route(a, graph, s1);
    sa.sim().begin_capture(s1);
    output = a.allocate(4 * MiB, s1);          // the graph's output, kept by the user
    void* scratch = a.allocate(64 * MiB, s1);  // its own segment, freed in the capture
    a.deallocate(scratch);
    CHECK(sa.sim().end_capture(s1));
  }
  CHECK(a.pool_stats(graph)->segments == 2);
  SECTION("the last user: cached segments go back now, the output's when it is freed") {
    const auto frees = sa.stats().num_device_free;
    a.release_pool(graph);
    CHECK(sa.stats().num_device_free == frees + 1);
    REQUIRE(a.pool_stats(graph));  // still there: a segment holds the output
    CHECK(a.pool_stats(graph)->segments == 1);
    CHECK(a.pool_stats(graph)->use_count == 0);
    void* other = a.allocate(4 * MiB, s1);  // the pool serves nobody any more
    CHECK(pool_of(a, other).is_default());
    a.deallocate(output);  // its segment goes back with it, and the pool is gone
    CHECK_FALSE(a.pool_stats(graph));
    CHECK(sa.stats().num_device_free == frees + 2);
    a.deallocate(other);
  }
  SECTION("another graph shares the pool: nothing goes back") {
    a.create_pool(graph);  // a second graph captured into the same pool (pool=g1.pool())
    const auto reserved = sa.stats().reserved_bytes.all().current;
    a.release_pool(graph);
    a.empty_cache();
    CHECK(sa.stats().reserved_bytes.all().current == reserved);
    CHECK(a.pool_stats(graph)->use_count == 1);
    a.deallocate(output);
    a.release_pool(graph);  // the second graph goes too
    CHECK_FALSE(a.pool_stats(graph));
  }
  SECTION("destroyed while another capture is under way: its memory goes back after it") {
    const gmp::MempoolId other_graph = gmp::graph_pool_handle();
    a.create_pool(other_graph);
    const auto frees = sa.stats().num_device_free;
    {
      gmp::AllocateToPool route(a, other_graph, s2);
      sa.sim().begin_capture(s2);
      a.release_pool(graph);
      a.deallocate(output);
      CHECK(sa.stats().num_device_free == frees);  // no cudaFree during a capture
      CHECK(sa.sim().end_capture(s2));
    }
    a.empty_cache();
    CHECK_FALSE(a.pool_stats(graph));
    CHECK(sa.stats().num_device_free == frees + 2);
    a.release_pool(other_graph);
  }
  a.validate();
  CHECK(sa.sim().counters().capture_violations == 0);
  a.empty_cache();
  CHECK(sa.stats().reserved_bytes.all().current == 0);
}
