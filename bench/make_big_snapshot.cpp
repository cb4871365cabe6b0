// Writes a synthetic snapshot with about N trace entries (tests/html/synthetic_snapshot.hpp: a
// simulated training loop through PyTorch's pools), for measuring how the reports scale.
//   make_big_snapshot OUT.pickle EVENTS [RANK WORLD_SIZE]
// With RANK and WORLD_SIZE the file is one rank's of a multi-process run (rank keys, no recorded
// peaks: the cross-rank report replays it), with RANK layers more, so that ranks differ.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "synthetic_snapshot.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: %s OUT.pickle EVENTS [RANK WORLD_SIZE]\n", argv[0]);
    return 2;
  }
  try {
    html_test::SyntheticOptions opt;
    opt.target_events = std::strtoull(argv[2], nullptr, 10);
    if (argc == 5) {
      opt.layers += std::atoi(argv[3]);
      opt.seed += static_cast<std::uint64_t>(std::atoi(argv[3]));
    }
    gpumemprof::Snapshot snap = html_test::make_synthetic_snapshot(opt);
    if (argc == 5) {
      snap.rank_info.rank = std::atoi(argv[3]);
      snap.rank_info.world_size = std::atoi(argv[4]);
      snap.rank_info.host = "node" + std::to_string(snap.rank_info.rank / 8);
      snap.rank_info.device = "cuda:" + std::to_string(snap.rank_info.rank % 8);
    }
    gpumemprof::write_snapshot_file(snap, argv[1]);
    std::printf("wrote %s: %zu trace entries, %zu segments\n", argv[1], snap.device_traces.at(0).size(),
                snap.segments.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
