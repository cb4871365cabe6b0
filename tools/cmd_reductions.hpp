// `gpumemprof reductions SNAPSHOT`: PyTorch's split-reduction buffers in a snapshot's history, by
// size (analysis/reduction_buffers.hpp says how they are found). The largest, from a run whose
// reductions are long enough, is where they stop growing on that device: the cap that
// `gpumemprof forecast --reduction-cap` takes (docs/forecast.md, "Reduction buffers").
#pragma once

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/reduction_buffers.hpp"
#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/codec/json_writer.hpp"

namespace gpumemprof::tools {

inline int cmd_reductions(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help", "--json"}, {"--device"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof reductions SNAPSHOT [--device N] [--json]\n"
        "  PyTorch's split-reduction buffers in a snapshot's history (PyTorch's pickle or ours, .gz too):\n"
        "  a sum or mean over a long dimension takes a buffer, then a semaphore of at most 64 KiB, and\n"
        "  frees both after its kernel. Lists each buffer size and how often it was requested, largest\n"
        "  first. From a run whose reductions are long enough (docs/forecast.md), the largest is where\n"
        "  they stop growing on that device: give it to `gpumemprof forecast --reduction-cap`.\n"
        "  --device: the trace to read (default: the one with the most entries). --json: one JSON document.\n",
        stdout);
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError("give one snapshot: gpumemprof reductions SNAPSHOT");
  const std::string& path = args.positional()[0];
  const CompactSnapshot snap = load_cli_snapshot(path);
  const int device = traced_device_option(args, snap, path, busiest_device(snap));
  const std::vector<ReductionBufferSize> sizes = reduction_buffer_sizes(request_stream(snap, device));
  std::size_t buffers = 0;
  for (const ReductionBufferSize& r : sizes) buffers += r.count;
  const std::uint64_t largest = sizes.empty() ? 0 : sizes.front().bytes;
  if (args.has("--json")) {
    JsonWriter w(std::cout);
    w.begin_dict();
    w.field("snapshot", path);
    w.field("device", device);
    w.field("reduction_buffers", buffers);
    w.field("largest_bytes", largest);
    w.key("sizes");
    w.begin_list();
    for (const ReductionBufferSize& r : sizes) {
      w.begin_dict();
      w.field("bytes", r.bytes);
      w.field("count", r.count);
      w.end_dict();
    }
    w.end_list();
    w.end_dict();
    w.finish();
    std::cout << '\n' << std::flush;
    return 0;
  }
  std::printf("%s, device %d's trace: %zu reduction buffer(s) (PyTorch's split reductions)", path.c_str(), device,
              buffers);
  if (sizes.empty()) {
    std::printf("\n");
    return 0;
  }
  std::printf(" of %zu size(s); the largest %s\n", sizes.size(), size_text(largest).c_str());
  for (const ReductionBufferSize& r : sizes) std::printf("  %12s  x%zu\n", size_text(r.bytes).c_str(), r.count);
  return 0;
}

}  // namespace gpumemprof::tools
