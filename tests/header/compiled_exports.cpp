// The exporters, the history layer, the external-memory ledger and the NVTX hook that a
// GPUMEMPROF_COMPILED_LIB program reaches through gpumemprof.hpp, which there declares them only: each is called once, so a body missing from libgpumemprof fails the link,
// and each result is checked, so a wrong instantiation fails the run.
#include <gpumemprof/gpumemprof.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

namespace gmp = gpumemprof;

namespace {
int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++failures;
  }
}
bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }
}  // namespace

int main() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "gpumemprof_compiled_exports";
  std::filesystem::create_directories(dir);
  auto& alloc = gmp::default_allocator("sim:0");
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::all}, "sim:0");
  void* p = alloc.allocate(3 << 20);
  alloc.deallocate(alloc.allocate(1 << 20));

  const gmp::Snapshot snap = gmp::snapshot("sim:0");
  const std::string pickle = (dir / "snap.pickle").string();
  gmp::write_snapshot_file(snap, pickle);
  const gmp::CompactSnapshot compact = gmp::load_compact_snapshot(pickle);
  check(gmp::load_snapshot(pickle).device_traces.size() == snap.device_traces.size(), "load_snapshot");
  std::ostringstream json;
  gmp::write_snapshot(snap, json, gmp::SnapshotFormat::json);
  check(gmp::parse_snapshot(json.str()).segments.size() == snap.segments.size(), "write_snapshot + parse_snapshot");
  check(gmp::parse_compact_snapshot(json.str()).segments.size() == snap.segments.size(), "parse_compact_snapshot");

  check(has(gmp::render_html_report(snap), "<!DOCTYPE html>"), "render_html_report(Snapshot)");
  check(has(gmp::render_html_report(compact, {.title = "compact"}), "compact"), "render_html_report(CompactSnapshot)");
  gmp::write_html_report(compact, (dir / "report.html").string());
  std::ostringstream trace;
  gmp::write_perfetto(compact, trace);
  check(has(trace.str(), "traceEvents"), "write_perfetto(CompactSnapshot)");
  gmp::write_perfetto_file(snap, (dir / "trace.json").string());
  check(has(gmp::memory_timeline_svg(snap, 0), "<svg"), "memory_timeline_svg(Snapshot)");
  gmp::export_memory_timeline((dir / "timeline.json").string(), "sim:0");
  check(std::filesystem::file_size(dir / "timeline.json") > 0, "export_memory_timeline");

  gmp::GPUMemoryProfiler profiler("sim:0");
  profiler.profile_function("step", [&] { alloc.deallocate(alloc.allocate(1 << 20)); });
  gmp::export_results(profiler.results(), (dir / "results.csv").string());
  gmp::export_profile(profiler, (dir / "profile.json").string());
  std::ostringstream csv;
  gmp::write_results_csv(csv, profiler.results());
  check(has(csv.str(), "step"), "export_results, export_profile, write_results_csv");

  gmp::write_rank_oom_dump((dir / "ranks").string(), 3, 4, gmp::OomReport{}, [&] { return snap; });
  check(std::filesystem::exists(dir / "ranks" / "rank-3.oom.txt") &&
            std::filesystem::exists(dir / "ranks" / "rank-3.pickle"),
        "write_rank_oom_dump");
  gmp::create_dump_folder((dir / "ranks").string());
  check(gmp::rank_file_path("d", 3, ".pickle") == "d/rank-3.pickle", "rank_file_path");
  check(!gmp::host_name().empty(), "host_name");

  // lib/history.cpp: snapshots of the default allocators' type, recorders, categories.
  const gmp::Snapshot own = alloc.snapshot();
  check(own.segments.size() == snap.segments.size() && own.device_traces.size() == snap.device_traces.size(),
        "CachingAllocator<AnyBackend>::snapshot");
  check(gmp::snapshot_devices({gmp::Device("sim:0")}).segments.size() == own.segments.size(), "snapshot_devices");
  check(!gmp::default_history_recorder("sim:0").trace().empty(), "HistoryRecorder::trace");
  check(gmp::allocator_settings(alloc.config()).front().first == "PYTORCH_CUDA_ALLOC_CONF", "allocator_settings");
  gmp::dump_snapshot((dir / "dump.pickle").string(), "sim:0");
  gmp::dump_snapshot(alloc, (dir / "dump_alloc.json").string());
  gmp::dump_snapshot_devices((dir / "dump_devices.pickle").string(), {gmp::Device("sim:0")});
  check(gmp::load_snapshot((dir / "dump.pickle").string()).segments.size() == own.segments.size() &&
            gmp::load_snapshot((dir / "dump_alloc.json").string()).segments.size() == own.segments.size() &&
            gmp::load_snapshot((dir / "dump_devices.pickle").string()).segments.size() == own.segments.size(),
        "dump_snapshot, dump_snapshot_devices");
  {
    auto tag = gmp::memory_category(gmp::category::activation);
    void* a = alloc.allocate(2 << 20);
    check(gmp::category_stats("sim:0")["activation"].current == (2 << 20), "category_stats");
    alloc.deallocate(a);
  }
  gmp::reset_category_peaks("sim:0");
  check(gmp::category_stats("sim:0")["activation"].peak == 0, "reset_category_peaks");
  std::uintptr_t frames[8];
  check(gmp::capture_stack(frames, 8) > 0 || !gmp::stacks_available, "capture_stack");
  // lib/device.cpp: the ledger of memory outside the allocators; lib/nvtx.cpp: the scope ranges.
  gmp::ExternalLedger ledger;
  ledger.record_alloc(1, 4096, "libfoo.so", "foo_init");
  check(ledger.view().allocations == 4096 && ledger.record_free(1) && ledger.view().allocations == 0, "ExternalLedger");
  check(gmp::nvtx_scope_ranges_enabled() == gmp::nvtx_available, "nvtx_scope_ranges_enabled");

  alloc.deallocate(p);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:0");
  std::filesystem::remove_all(dir);
  if (failures == 0) std::puts("ok: the exporters and the history layer of the compiled library link and run");
  return failures == 0 ? 0 : 1;
}
