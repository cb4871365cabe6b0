// The profiler's summary explains itself: nested scopes are not counted twice in the totals, the
// table says which columns are per call and which are totals, and the peak is one figure that the
// profiler, the tracker and a snapshot of the same run (`gpumemprof summary`) all state.
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/recorded_blocks.hpp"
#include "gpumemprof/analysis/snapshot_replay.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"
#include "profiler_test_util.hpp"

TEST_CASE("summary: nested scopes count once in the totals; one peak for profiler, tracker and snapshot") {
  SimDevice d;
  gmp::HistoryRecorder recorder(gmp::HistoryOptions{.context = gmp::HistoryContext::none});
  recorder.attach(d.allocator);
  gmp::MemoryTracker tracker(d.allocator, {.enable_alerts = false});
  gmp::GPUMemoryProfiler profiler(d.allocator);

  d.free(d.alloc(8 * MiB));  // outside every scope: the run's peak (8 MiB)
  std::vector<void*> kept;
  {
    auto step = profiler.profile_context("step");
    kept.push_back(d.alloc(2 * MiB));
    {
      auto forward = profiler.profile_context("forward");
      kept.push_back(d.alloc(MiB));
      d.free(d.alloc(3 * MiB));  // 2 + 1 + 3 = 6 MiB live
    }
    {
      auto backward = profiler.profile_context("backward");
      d.free(d.alloc(4 * MiB));  // 2 + 1 + 4 = 7 MiB live: the highest inside a scope
    }
  }
  profiler.profile_function("step", [&] { d.free(d.alloc(MiB)); });
  d.allocator.validate();

  // Another thread's scope is outermost on its thread, even while the main thread has one open.
  {
    auto outer = profiler.profile_context("outer");
    std::thread([&] { profiler.profile_function("other_thread", [] {}); }).join();
  }

  const gmp::ProfileSummary s = profiler.get_summary();
  CHECK(s.total_function_calls == 6);
  CHECK(s.nested_function_calls == 2);  // forward and backward
  // Outermost only: step (2+1+3+4 allocated, 3+4 freed), step (1, 1), outer and other_thread (0).
  CHECK(s.total_memory_allocated == 11 * iMiB);
  CHECK(s.total_memory_freed == 8 * iMiB);
  CHECK(s.net_memory_change == 3 * iMiB);
  const auto& step = s.function_summaries.at("step");
  CHECK(step.call_count == 2);
  CHECK(step.total_memory_allocated == 11 * iMiB);  // a row includes its nested scopes
  CHECK(step.peak_memory == 7 * iMiB);
  CHECK(s.function_summaries.at("forward").total_memory_allocated == 4 * iMiB);
  CHECK(s.function_summaries.at("backward").peak_memory == 7 * iMiB);
  for (const gmp::ProfileResult& r : profiler.results()) {
    CHECK(r.depth == (r.name == "forward" || r.name == "backward" ? 1U : 0U));
  }
  double outer_time = 0.0;
  for (const gmp::ProfileResult& r : profiler.results()) outer_time += r.depth == 0 ? r.execution_time : 0.0;
  CHECK(s.total_execution_time == Approx(outer_time));

  // One peak: since the baseline, inside scopes or not.
  CHECK(s.peak_memory_usage == 8 * iMiB);
  CHECK(tracker.get_statistics().peak_memory == 8 * iMiB);  // no sample saw it: the allocator did
  const gmp::SnapshotReplayResult replayed = gmp::replay_snapshot(gmp::snapshot(d.allocator), 0);
  CHECK(replayed.peak_allocated == 8 * iMiB);
  CHECK(gmp::format_peak_allocated(gmp::snapshot(d.allocator)) ==
        "peak allocated, device 0: 8.00 MiB = 8388608 bytes (the blocks its trace recorded)\n");

  const std::string table = gmp::format_summary(s);
  INFO(table);
  CHECK(table.find("6 calls of 5 names (2 nested in other scopes)") != std::string::npos);
  CHECK(table.find("peak allocated since baseline 8.00 MiB, net change in those calls +3.00 MiB") != std::string::npos);
  CHECK(table.find("allocated in outermost calls 11.00 MiB, freed 8.00 MiB") != std::string::npos);
  CHECK(table.find("per call: avg time, avg allocated; totals over the name's calls: calls, total time, "
                   "net change;") != std::string::npos);
  CHECK(table.find("A row includes the scopes nested in its calls.") != std::string::npos);

  // A new baseline starts a new peak; the tracker's restarts with clear_events().
  profiler.clear_results();
  tracker.clear_events();
  CHECK(profiler.get_summary().peak_memory_usage == 3 * iMiB);  // what is live now
  d.free(d.alloc(2 * MiB));
  CHECK(profiler.get_summary().peak_memory_usage == 5 * iMiB);
  CHECK(tracker.get_statistics().peak_memory == 5 * iMiB);
  for (void* p : kept) d.free(p);
  d.allocator.validate();
}

TEST_CASE("summary: a scope ended on another thread releases its entry thread's nesting") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  auto moved = profiler.profile_context("moved");
  std::thread([s = std::move(moved)]() mutable { (void)s.stop(); }).join();
  profiler.profile_function("after", [] {});
  const gmp::ProfileSummary s = profiler.get_summary();
  CHECK(s.nested_function_calls == 0);
  CHECK(profiler.results().back().depth == 0);
}
