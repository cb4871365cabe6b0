// Helpers for the history tests: a simulated allocator with a recorder attached, and ways to
// look at what was recorded.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "allocator/sim_allocator.hpp"
#include "gpumemprof/export/formats/dump_snapshot.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/snapshot_builder.hpp"

/// A simulated device, its allocator and a recorder attached to it.
struct Recorded {
  explicit Recorded(const gmp::HistoryOptions& options = {}, std::size_t capacity = 80 * GiB,
                    std::string_view conf = "")
      : sim(conf, capacity), recorder(options) {
    recorder.attach(sim.a);
  }
  SimAllocator& a() { return sim.a; }
  SimAlloc sim;
  gmp::HistoryRecorder recorder;  // declared after the allocator: destroyed (detached) first
};

inline std::vector<gmp::TraceAction> actions(const std::vector<gmp::TraceEntry>& trace) {
  std::vector<gmp::TraceAction> out;
  for (const auto& e : trace) out.push_back(e.action);
  return out;
}

inline std::size_t count(const std::vector<gmp::TraceEntry>& trace, gmp::TraceAction a) {
  return static_cast<std::size_t>(
      std::count_if(trace.begin(), trace.end(), [a](const gmp::TraceEntry& e) { return e.action == a; }));
}

/// The entries of one action, in order.
inline std::vector<gmp::TraceEntry> only(const std::vector<gmp::TraceEntry>& trace, gmp::TraceAction a) {
  std::vector<gmp::TraceEntry> out;
  for (const auto& e : trace) {
    if (e.action == a) out.push_back(e);
  }
  return out;
}

/// The snapshot block at `address`, or nullptr.
inline const gmp::SnapshotBlock* block_at(const gmp::Snapshot& s, std::uintptr_t address) {
  for (const auto& seg : s.segments) {
    for (const auto& b : seg.blocks) {
      if (b.address == address) return &b;
    }
  }
  return nullptr;
}

/// True when `frames` is a stack whose innermost frame is in the file named `file` (its last
/// path component) at `line`.
inline bool starts_at(const gmp::Frames& frames, const std::string& file, std::int64_t line) {
  if (frames == nullptr || frames->empty()) return false;
  const gmp::Frame& f = frames->front();
  return f.line == line && f.filename.size() >= file.size() &&
         f.filename.compare(f.filename.size() - file.size(), file.size(), file) == 0;
}

/// A path in the temporary directory, unique to this process.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("gpumemprof-history-" + std::to_string(::getpid()) + "-" + name);
}

/// True when python3 can run the pickle checks.
inline bool have_python() { return std::system("python3 -c 'import pickle' >/dev/null 2>&1") == 0; }
