// `gpumemprof timeline SNAPSHOT -o OUT.json|OUT.html`: memory over time by category, as
// torch.profiler's export_memory_timeline writes it (.json) or as an offline page (.html).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "cli_args.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "gpumemprof/export/reports/memory_timeline.hpp"

namespace gpumemprof::tools {

inline int cmd_timeline(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--output", "--device", "--rules"}, {{"-o", "--output"}});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof timeline SNAPSHOT -o OUT.json|OUT.html [--device N] [--rules FILE]\n"
        "  Memory over time by category (parameter, optimizer_state, input, temporary, activation,\n"
        "  gradient, autograd_detail, unknown, and your own) from the snapshot's trace.\n"
        "  .json: torch.profiler's export_memory_timeline layout [times_us, sizes], 9 numbers a row\n"
        "  (your own categories count as unknown); .html: an offline stacked-area page with the\n"
        "  annotated ranges and steps. --device: which device's trace (default: the first with one).\n"
        "  --rules FILE: categories for untagged memory, one rule a line, first match wins:\n"
        "    CATEGORY frame PATTERN   (a regular expression on any frame: NAME FILE:LINE)\n"
        "    CATEGORY scope PATTERN   (on the name of an annotated range open at the allocation)\n",
        stdout);
    return 0;
  }
  args.expect_positional(1, "one SNAPSHOT file");
  if (!args.has("--output")) throw UsageError("name the output with -o OUT.json or -o OUT.html");
  // Never the input (a .json snapshot named as the output), and a path that can be written.
  const std::string out = args.output_file("--output", args.positional());
  const auto ends = [&out](const std::string& s) {
    return out.size() >= s.size() && out.compare(out.size() - s.size(), s.size(), s) == 0;
  };
  if (!ends(".json") && !ends(".html") && !ends(".htm")) {
    throw UsageError("-o " + out + ": name a .json file (torch.profiler's layout) or a .html page");
  }
  std::optional<CategoryRules> rules;
  if (args.has("--rules")) rules = CategoryRules::load(args.get("--rules"));  // bad lines: one error, exit 2
  const std::string& path = args.positional()[0];
  const CompactSnapshot snap = load_cli_snapshot(path);  // gzip-compressed too
  // Without --device: the first device with a trace (a rank's snapshot on cuda:1 has only that
  // one), as summary and html find it.
  const int device = traced_device_option(args, snap, path);
  write_memory_timeline_file(snap, device, out, rules ? &*rules : nullptr);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace gpumemprof::tools
