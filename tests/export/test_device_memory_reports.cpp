// The whole device in every report: snapshots carry the ledger in a key of their own (read back
// exactly, ignored by PyTorch's schema), memory_summary, the OOM report and the HTML report show
// it. Exact numbers on a simulated device with a context and external allocations.
#include <cstdlib>

#include "catch.hpp"
#include "../units.hpp"
#include "export_support.hpp"
#include "gpumemprof/analysis/oom_report.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/memory_summary.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"

using export_test::TempDir;

namespace {


/// 80 GiB with a 2.1 GiB context, NCCL holding 14 GiB, cuBLAS 1000 bytes (one 2 MiB granule).
struct BusyDevice {
  BusyDevice() : a(gmp::SimulatedBackend(options()), gmp::AllocatorConfig{}) {
    gmp::SimulatedBackend& sim = a.backend();
    nccl1 = sim.external_malloc(10 * GiB, "libnccl.so", "ncclCommInitRank");
    nccl2 = sim.external_malloc(4 * GiB, "libnccl.so", "ncclProxyConnect");
    blas = sim.external_malloc(1000, "libcublas.so", "cublasCreate_v2");
  }
  ~BusyDevice() {
    for (void* p : {nccl1, nccl2, blas}) a.backend().external_free(p);
  }
  BusyDevice(const BusyDevice&) = delete;
  BusyDevice& operator=(const BusyDevice&) = delete;
  static gmp::SimulatedOptions options() {
    gmp::SimulatedOptions o;
    o.context_bytes = 2150 * MiB;
    return o;
  }
  gmp::CachingAllocator<gmp::SimulatedBackend> a;
  void* nccl1 = nullptr;
  void* nccl2 = nullptr;
  void* blas = nullptr;
};

/// `snap` written as s.pickle and s.json in `dir`, and each read back.
std::vector<gmp::Snapshot> written_and_read(const gmp::Snapshot& snap, TempDir& dir) {
  std::vector<gmp::Snapshot> out;
  for (const char* name : {"s.pickle", "s.json"}) {
    const std::string path = dir.file(name);
    gmp::write_snapshot_file(snap, path);
    out.push_back(gmp::load_snapshot(path));
  }
  return out;
}

}  // namespace

TEST_CASE("device memory: a snapshot carries the ledger in its own key and reads back exactly") {
  BusyDevice d;
  void* p = d.a.allocate(61 * GiB);
  const gmp::Snapshot snap = gmp::snapshot(d.a);
  REQUIRE(snap.device_memory.size() == 1);
  const gmp::DeviceMemory& m = snap.device_memory[0];
  CHECK(m.reserved == 61 * GiB);
  CHECK(m.external == 14 * GiB + 1000);
  CHECK(m.context == 2150 * MiB);
  CHECK(m.unattributed == static_cast<std::int64_t>(2 * MiB - 1000));

  TempDir dir;
  for (const gmp::Snapshot& back : written_and_read(snap, dir)) {
    REQUIRE(back.device_memory.size() == 1);
    const gmp::DeviceMemory& r = back.device_memory[0];
    CHECK(r.device == "sim:0");
    CHECK(r.total == 80 * GiB);
    CHECK(r.used == m.used);
    CHECK(r.allocated == 61 * GiB);
    CHECK(r.reserved == 61 * GiB);
    CHECK(r.external == m.external);
    CHECK(r.external_by_owner == m.external_by_owner);
    CHECK(r.code == 0);
    CHECK(r.code_by_owner.empty());
    CHECK(r.context == m.context);
    CHECK(r.unattributed == m.unattributed);
    CHECK(r.tracking);
  }

  // PyTorch's schema still holds: the key is beside segments and device_traces, not in them.
  const std::string path = dir.file("s.pickle");
  const std::string checker = export_test::check_snapshot_script();
  REQUIRE(export_test::have_python());
  {
    std::string out;
    const int rc = export_test::run_python(R"(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
assert list(s)[:4] == ['segments', 'device_traces', 'allocator_settings', 'external_annotations'], list(s)
d = s['device_memory'][0]
assert d['external_by_owner'][0] == {'owner': 'libnccl.so', 'bytes': 14 << 30, 'count': 2,
                                     'top_site': 'ncclCommInitRank'}, d
assert d['context'] == 2150 << 20 and d['unattributed'] == (2 << 20) - 1000, d
assert all('device_memory' not in seg for seg in s['segments'])
print('ok')
)",
                                           {path}, &out);
    INFO(out);
    CHECK(rc == 0);
    CHECK(export_test::run_python(export_test::read_bytes(checker), {path}, &out) == 0);
    INFO(out);
    CHECK(out.find(path + ": ok") != std::string::npos);
  }
  d.a.deallocate(p);
}

TEST_CASE("device memory: PyTorch's snapshots have no device key and write back without one") {
  const gmp::Snapshot ref = gmp::load_snapshot(export_test::reference_pickle());
  CHECK(ref.device_memory.empty());
  std::ostringstream os;
  gmp::write_snapshot(ref, os, gmp::SnapshotFormat::json);
  CHECK(os.str().find("device_memory") == std::string::npos);
}

TEST_CASE("device memory: the OOM report names who holds the device") {
  BusyDevice d;
  auto reporter = gmp::attach_oom_reporter(d.a);
  void* p = d.a.allocate(61 * GiB);
  CHECK_THROWS_AS(d.a.allocate(3 * GiB), gmp::OutOfMemoryError);
  REQUIRE(reporter->last().has_value());
  const gmp::OomReport r = *reporter->last();
  CHECK(r.device.external == 14 * GiB + 1000);
  const std::string text = r.to_string();
  INFO(text);
  CHECK(text.find("\nOut of memory with 61.00 GiB reserved of 80.00 GiB: 14.00 GiB held by libnccl.so, "
                  "1000 bytes held by libcublas.so, 2.10 GiB CUDA context, 2.00 MiB unattributed.\n") !=
        std::string::npos);
  d.a.deallocate(p);
  d.a.validate();
}

TEST_CASE("device memory: memory_summary of a device ends with the whole device") {
  ::setenv("GPUMEMPROF_SIM_CONTEXT", "300MiB", 1);
  const gmp::Device dev("sim:5");
  void* nccl = gmp::sim_external_malloc(dev, 64 * MiB, "libnccl.so", "ncclCommInitRank");
  ::unsetenv("GPUMEMPROF_SIM_CONTEXT");
  void* p = gmp::default_allocator(dev).allocate(10 * MiB);
  const std::string text = gmp::memory_summary(dev);
  INFO(text);
  CHECK(text.find("|===========================================================================|\n"
                  "device sim:5: 374.00 MiB used of 80.00 GiB (the driver's count)\n"
                  "  allocator reserved      10.00 MiB  (10.00 MiB allocated, 0 bytes cached)\n"
                  "  external allocations    64.00 MiB\n"
                  "    libnccl.so            64.00 MiB  in 1 allocation, most from ncclCommInitRank\n"
                  "  CUDA context            300.00 MiB\n"
                  "  unattributed            0 bytes\n") != std::string::npos);
  gmp::default_allocator(dev).deallocate(p);
  gmp::sim_external_free(dev, nccl);
}

TEST_CASE("device memory: the HTML report draws the device bar from the snapshot") {
  BusyDevice d;
  void* p = d.a.allocate(40 * GiB);
  const std::string html = gmp::render_html_report(gmp::snapshot(d.a));
  const auto section = html.find("<section class=\"card\" id=\"device-card\">");
  REQUIRE(section != std::string::npos);
  CHECK(section < html.find("id=\"tl-card\""));  // before the timeline
  CHECK(html.find("<h3>sim:0: 56.10 GiB used of 80.00 GiB</h3>") != std::string::npos);
  CHECK(html.find("<div style=\"width:50.000%;background:#2e86c1\" title=\"live (allocated) 40.00 GiB\"></div>") !=
        std::string::npos);
  CHECK(html.find("<div style=\"width:17.500%;background:#d9822b\" title=\"libnccl.so 14.00 GiB\"></div>") !=
        std::string::npos);
  CHECK(html.find("title=\"CUDA context 2.10 GiB\"") != std::string::npos);
  CHECK(html.find("title=\"unattributed 2.00 MiB\"") != std::string::npos);
  CHECK(html.find("2 allocations, most from ncclCommInitRank") != std::string::npos);
  CHECK(html.find("title=\"free 23.90 GiB\"") != std::string::npos);

  // A snapshot without the key (PyTorch's) has no device section.
  const std::string plain = gmp::render_html_report(gmp::load_compact_snapshot(export_test::reference_pickle()));
  CHECK(plain.find("device-card") == std::string::npos);
  d.a.deallocate(p);
}

namespace {
// Stand for a library's own cudaMalloc calls, made from two places.
GPUMEMPROF_NOINLINE void* nccl_like_init(const gmp::Device& dev, int& line) {
  line = __LINE__ + 1;
  void* p = gmp::sim_external_malloc(dev, 64 * MiB, "libnccl.so");
  asm volatile("" : : "r"(p) : "memory");  // no tail call: this frame stays on the stack
  return p;
}
GPUMEMPROF_NOINLINE void* nccl_like_connect(const gmp::Device& dev) {
  void* p = gmp::sim_external_malloc(dev, 40 * MiB, "libnccl.so");
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

/// Turns external stacks on for one test (a program keeps them on once asked).
struct ExternalStacks {
  ExternalStacks() { (void)gmp::track_external_memory({.stacks = true}); }
  ~ExternalStacks() { gmp::detail::external_stacks.store(false); }
  ExternalStacks(const ExternalStacks&) = delete;
  ExternalStacks& operator=(const ExternalStacks&) = delete;
};
}  // namespace

TEST_CASE("device memory: with stacks, the owner's top site comes with its C++ stack in every report") {
  const gmp::Device dev("sim:4");
  ExternalStacks stacks;
  int line = 0;
  void* init = nccl_like_init(dev, line);
  void* conn1 = nccl_like_connect(dev);
  void* conn2 = nccl_like_connect(dev);
  gmp::sim_external_free(dev, conn1);  // left: 64 MiB from nccl_like_init, 40 MiB from nccl_like_connect
  const gmp::DeviceMemory m = gmp::device_memory(dev);
  REQUIRE(m.external_by_owner.size() == 1);
  const gmp::OwnerMemory& o = m.external_by_owner[0];
  CHECK(o.bytes == 104 * MiB);
  CHECK(o.count == 2);
  REQUIRE_FALSE(o.top_stack.empty());
  INFO(o.top_stack.front());
  CHECK(o.top_site == o.top_stack.front());
  if (gmp::stacks_available) {  // the first frame outside gpumemprof: the call in nccl_like_init
    CHECK(o.top_stack.front().find("nccl_like_init") != std::string::npos);
    CHECK(o.top_stack.front().ends_with("test_device_memory_reports.cpp:" + std::to_string(line)));
    CHECK(o.top_stack.size() > 1);
  }

  // memory_summary and `gpumemprof summary`: the stack under its owner.
  const std::string text = gmp::format_device_memory(m);
  INFO(text);
  CHECK(text.find("    libnccl.so            104.00 MiB  in 2 allocations, most from:\n        " + o.top_stack.front() +
                  "\n") != std::string::npos);

  // Snapshots carry it (key top_stack) and read it back exactly.
  gmp::Snapshot snap;
  snap.device_memory.push_back(m);
  TempDir dir;
  for (const gmp::Snapshot& back : written_and_read(snap, dir)) {
    REQUIRE(back.device_memory.size() == 1);
    CHECK(back.device_memory[0].external_by_owner == m.external_by_owner);
  }

  // The HTML report lists its frames beside the owner's row.
  std::string frame;
  gmp::detail::append_html_escaped(frame, o.top_stack.front());
  CHECK(gmp::detail::html_device_section(snap.device_memory).find("<pre style=\"margin:2px 0;font-size:11px\">" + frame +
                                                                 "\n") != std::string::npos);

  // The OOM report says where the owner's memory came from.
  gmp::OomReport r;
  r.device_name = "sim:4";
  r.device = m;
  const std::string oom = r.to_string();
  INFO(oom);
  CHECK(oom.find("\n  libnccl.so holds 104.00 MiB, most from:\n      " + o.top_stack.front() + "\n") !=
        std::string::npos);

  gmp::sim_external_free(dev, conn2);
  CHECK(gmp::device_memory(dev).external_by_owner[0].top_stack == o.top_stack);
  gmp::sim_external_free(dev, init);
}
