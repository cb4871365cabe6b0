// Writes a synthetic snapshot with about N trace entries (tests/html/synthetic_snapshot.hpp: a
// simulated training loop through PyTorch's pools), for measuring how the reports scale.
//   make_big_snapshot OUT.pickle EVENTS
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "synthetic_snapshot.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT.pickle EVENTS\n", argv[0]);
    return 2;
  }
  try {
    html_test::SyntheticOptions opt;
    opt.target_events = std::strtoull(argv[2], nullptr, 10);
    const gpumemprof::Snapshot snap = html_test::make_synthetic_snapshot(opt);
    gpumemprof::write_snapshot_file(snap, argv[1]);
    std::printf("wrote %s: %zu trace entries, %zu segments\n", argv[1], snap.device_traces.at(0).size(),
                snap.segments.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
