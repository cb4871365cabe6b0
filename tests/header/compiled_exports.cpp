// What a GPUMEMPROF_COMPILED_LIB program reaches through gpumemprof.hpp, which there declares it
// only: the exporters and reports, the history layer, the analyses, the leak detector and tracker,
// the external-memory ledger and the NVTX hook. Each is called once, so a body missing from
// libgpumemprof fails the link, and each result is checked, so a wrong instantiation fails the run.
#include <gpumemprof/gpumemprof.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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
  const gmp::Snapshot own = gmp::snapshot(alloc);
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
  std::uintptr_t raw[8];
  check(gmp::capture_stack(raw, 8) > 0 || !gmp::stacks_available, "capture_stack");
  // lib/device.cpp: the ledger of memory outside the allocators; lib/nvtx.cpp: the scope ranges.
  gmp::ExternalLedger ledger;
  ledger.record_alloc(1, 4096, "libfoo.so", "foo_init");
  check(ledger.view().allocations == 4096 && ledger.record_free(1) && ledger.view().allocations == 0, "ExternalLedger");
  check(gmp::nvtx_scope_ranges_enabled() == gmp::nvtx_available, "nvtx_scope_ranges_enabled");
  // The analysis and profiler bodies of lib/analysis.cpp, lib/profiler.cpp and lib/reports.cpp.
  const gmp::SegmentFacts facts = gmp::snapshot_facts(snap);
  check(facts.allocated >= (3u << 20) && gmp::segment_facts(snap.segments.front()).reserved > 0 &&
            gmp::segment_facts(alloc.segments().front()).reserved > 0,
        "snapshot_facts, segment_facts");
  check(gmp::format_fraction(0.375) == "37.5%" && gmp::format_fraction(std::nullopt) == "n/a", "format_fraction");
  const gmp::Frame user{"/home/me/train.cpp", 12, "train_step"};
  const gmp::Frame ours{"x.cpp", 1, "gpumemprof::v0::CachingAllocator<int>::allocate(unsigned long)"};
  const gmp::Frames frames = std::make_shared<const std::vector<gmp::Frame>>(std::vector<gmp::Frame>{ours, user});
  check(gmp::names_gpumemprof_function(ours.name) && gmp::is_gpumemprof_frame(ours) && gmp::is_internal_frame(ours) &&
            !gmp::is_internal_frame(user) && gmp::user_frame(frames) == &(*frames)[1] &&
            has(gmp::user_frame_label(frames), "train.cpp"),
        "user_frame and its rule");
  check(has(gmp::memory_summary(alloc.memory_stats(), "sim:0"), "Allocated memory") &&
            has(gmp::memory_summary("sim:0", true), "sim:0"),
        "memory_summary");
  check(gmp::summarize(snap).usage.allocated == facts.allocated &&
            has(gmp::format_summary(gmp::summarize(compact)), "segments:"),
        "summarize(Snapshot, CompactSnapshot), format_summary");

  auto reporter = gmp::attach_oom_reporter(alloc);
  try {
    (void)alloc.allocate(std::size_t{1} << 50);
  } catch (const gmp::OutOfMemoryError&) {
  }
  check(reporter->count() == 1 && reporter->last() && has(reporter->last()->to_string(), "Out of memory on sim:0"),
        "attach_oom_reporter, OomReporter, OomReport::to_string");
  check(gmp::make_oom_report(alloc, reporter->last()->info).device_name == "sim:0", "make_oom_report");

  gmp::LeakDetector leaks(alloc);
  for (int i = 0; i < 12; ++i) {
    auto call = leaks.track("leaky");
    (void)alloc.allocate(1 << 20);  // kept on purpose: a leak to find
    call.end();
  }
  leaks.add_point("points", 1);
  leaks.observe(profiler.results());
  const gmp::LeakReport leak_report = leaks.report();
  std::ostringstream leak_text;
  leak_text << leak_report;
  check(leak_report.leak_suspected() && has(leak_report.format(), "LEAK") && has(leak_text.str(), "leaky"),
        "LeakDetector, LeakReport");
  leaks.clear();
  check(leaks.report().growth.empty(), "LeakDetector::clear");

  gmp::MemoryTracker tracker("sim:0");
  gmp::MemoryTracker tracker_of(alloc, {.thresholds = {.warning_bytes = 1}});
  const std::size_t id = tracker_of.add_alert_callback([](const gmp::TrackingEvent&) {});
  tracker_of.set_thresholds(tracker_of.thresholds());
  tracker_of.sample_now();
  tracker_of.process(gmp::read_memory(*tracker_of.source(), "sample"));
  tracker_of.remove_alert_callback(id);
  tracker.start_tracking();
  tracker.stop_tracking();
  check(!tracker_of.get_events(gmp::TrackingEventType::warning).empty() && tracker_of.get_statistics().samples == 2 &&
            tracker.get_statistics().capacity > 0,
        "MemoryTracker");
  tracker_of.clear_events();
  check(tracker_of.get_events().empty(), "MemoryTracker::clear_events");

  alloc.deallocate(p);
  gmp::record_memory_history({.enabled = gmp::HistoryEnabled::off}, "sim:0");
  std::filesystem::remove_all(dir);
  if (failures == 0) std::puts("ok: what the compiled library holds links and runs");
  return failures == 0 ? 0 : 1;
}
