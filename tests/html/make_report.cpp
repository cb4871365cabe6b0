// Writes an HTML report of a synthetic snapshot (or of a snapshot file) for the browser check.
//   html_make_report OUT.html [--events N] [--no-trace] [--no-frames] [--two-devices] [--idle] [--title TEXT]
//   html_make_report OUT.html --snapshot FILE.pickle     (when the snapshot reader is built in)
//   html_make_report OUT.html --ranks N   (N synthetic rank files in OUT.ranks/, their cross-rank page)
// Prints one line: bytes written, entries, seconds spent rendering.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"
#include "synthetic_snapshot.hpp"

#if __has_include("gpumemprof/export/formats/snapshot_reader.hpp")
#include <filesystem>

#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/export/reports/html_ranks_report.hpp"
#define HTML_TEST_HAS_READER 1
#else
#define HTML_TEST_HAS_READER 0
#endif

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s OUT.html [--events N] [--no-trace] [--no-frames] [--two-devices] [--title TEXT] [--snapshot FILE] [--ranks N]\n",
        argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  html_test::SyntheticOptions opt;
  gpumemprof::HtmlReportOptions ropt;
  std::string snapshot_path;
  bool two_devices = false;
  bool idle = false;  // the last entry an hour after the rest: wall-clock time mostly idle
  bool timeline = false;  // write the memory timeline page by category instead of the report
  int ranks = 0;          // write rank files and their cross-rank page instead
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--events" && i + 1 < argc)
      opt.target_events = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--no-trace")
      opt.with_trace = false;
    else if (a == "--no-frames")
      opt.with_frames = false;
    else if (a == "--two-devices")
      two_devices = true;
    else if (a == "--idle")
      idle = true;
    else if (a == "--timeline")
      timeline = true;
    else if (a == "--title" && i + 1 < argc)
      ropt.title = argv[++i];
    else if (a == "--snapshot" && i + 1 < argc)
      snapshot_path = argv[++i];
    else if (a == "--ranks" && i + 1 < argc)
      ranks = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "unknown argument: %s\n", a.c_str());
      return 2;
    }
  }
  try {
    if (ranks > 0) {
#if HTML_TEST_HAS_READER
      // Rank r: r layers more than rank 0 (another seed), so ranks differ in peak and step length.
      const std::string dir = out + ".ranks";
      std::filesystem::create_directories(dir);
      for (int r = 0; r < ranks; ++r) {
        html_test::SyntheticOptions o = opt;
        o.layers += r;
        o.seed += static_cast<std::uint64_t>(r);
        gpumemprof::Snapshot snap = html_test::make_synthetic_snapshot(o);
        snap.rank_info.rank = r;
        snap.rank_info.world_size = ranks;
        snap.rank_info.host = "node0";
        snap.rank_info.device = "cuda:" + std::to_string(r);
        gpumemprof::write_snapshot_file(snap, dir + "/rank-" + std::to_string(r) + ".pickle");
      }
      gpumemprof::HtmlRanksOptions ro;
      ro.title = ropt.title;
      const auto t0 = std::chrono::steady_clock::now();
      const gpumemprof::HtmlRanksModel model = gpumemprof::build_html_ranks_model({dir}, ro);
      gpumemprof::write_html_ranks_report(model, out, ro);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("wrote %s: %d ranks aligned by %s, rendered in %.3f s\n", out.c_str(), ranks,
                  model.by_steps ? "steps" : "time", secs);
      return 0;
#else
      std::fprintf(stderr, "this build has no snapshot reader; cannot write rank files\n");
      return 77;
#endif
    }
    gpumemprof::Snapshot snap;
    if (!snapshot_path.empty()) {
#if HTML_TEST_HAS_READER
      snap = gpumemprof::load_snapshot(snapshot_path);
#else
      std::fprintf(stderr, "this build has no snapshot reader; cannot read %s\n", snapshot_path.c_str());
      return 77;
#endif
    } else {
      snap = html_test::make_synthetic_snapshot(opt);
    }
    if (two_devices) {  // device 1: another run (other seed, half the length)
      html_test::SyntheticOptions o1 = opt;
      o1.seed += 1;
      o1.target_events /= 2;
      o1.layers = 12;
      gpumemprof::Snapshot other = html_test::make_synthetic_snapshot(o1);
      snap.device_traces.resize(2);
      snap.device_traces[1] = std::move(other.device_traces[0]);
      for (auto& seg : other.segments) {
        seg.device = 1;
        snap.segments.push_back(std::move(seg));
      }
    }
    if (idle && !snap.device_traces.empty() && !snap.device_traces[0].empty()) {
      snap.device_traces[0].back().time_us += std::int64_t{3600} * 1'000'000;
    }
    if (timeline) {  // the synthetic run by category, through rules on its frames
      const auto rules = gpumemprof::CategoryRules::parse(
          "parameter frame Linear::Linear\n"
          "optimizer_state frame Adam::init_state\n"
          "input frame DataLoader\n"
          "gradient frame backward\n"
          "activation frame forward\n",
          "make_report");
      gpumemprof::write_memory_timeline_file(snap, 0, out, &rules);
      std::printf("wrote %s: memory timeline by category\n", out.c_str());
      return 0;
    }
    std::size_t entries = 0;
    for (const auto& t : snap.device_traces) entries += t.size();
    const auto t0 = std::chrono::steady_clock::now();
    const std::string html = gpumemprof::render_html_report(snap, ropt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gpumemprof::write_file_atomically(out, std::string_view(html));
    std::printf("wrote %s: %zu bytes, %zu trace entries, %zu segments, rendered in %.3f s\n", out.c_str(), html.size(),
                entries, snap.segments.size(), secs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
