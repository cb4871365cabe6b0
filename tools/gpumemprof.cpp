// The gpumemprof command-line tool. Bad input gets one clear line on stderr and exit code 2.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli_args.hpp"
#include "cmd_diff.hpp"
#include "cmd_forecast.hpp"
#include "cmd_html.hpp"
#include "cmd_reductions.hpp"
#include "cmd_replay.hpp"
#include "cmd_slice.hpp"
#include "cmd_snapshot.hpp"
#include "cmd_timeline.hpp"
#include "cmd_tune.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

#if GPUMEMPROF_CLI_DEMO
#include "demo.hpp"
#endif

namespace {
int run_demo_command(int argc, char** argv) {
#if GPUMEMPROF_CLI_DEMO
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: gpumemprof demo [options]\n"
                  "  A profiled training loop (GPU with cuBLAS, else the simulated device): per-step\n"
                  "  memory, a summary table, a snapshot and an HTML report.\n%s",
                  gpumemprof_demo::demo_usage());
      return 0;
    }
  }
  gpumemprof_demo::DemoOptions options;
  try {
    options = gpumemprof_demo::parse_demo_args(argc, argv, 2);
  } catch (const std::invalid_argument& e) {
    throw gpumemprof::tools::UsageError(e.what());
  }
  return gpumemprof_demo::run_demo(options);
#else
  (void)argc;
  (void)argv;
  throw gpumemprof::tools::UsageError("this gpumemprof was built without the examples (-Dexamples=false)");
#endif
}

// The demo's line only where the demo is built in (-Dexamples).
#if GPUMEMPROF_CLI_DEMO
#define GPUMEMPROF_CLI_DEMO_LINE \
  "  demo             a profiled training loop (GPU with cuBLAS, else the simulated device)\n"
#else
#define GPUMEMPROF_CLI_DEMO_LINE ""
#endif

const char* usage() {
  return "usage: gpumemprof <command> [options]\n"
         "commands:\n"
         "  replay TRACE     replay an allocation trace through the caching allocator\n"
         "  replay SNAPSHOT  replay a snapshot's history (PyTorch's or ours) under any ALLOC_CONF\n"
         "  tune SNAPSHOT    rank allocator configs for a snapshot's history; print the one to use\n"
         "  forecast --run 8=A --run 16=B --at 64  peak memory at a larger batch or sequence length\n"
         "  reductions SNAPSHOT  PyTorch's reduction buffers by size (where they stop: forecast's cap)\n"
         "  diff A B         compare two snapshots or profiles by allocation site and scope (--budget for CI)\n"
         "  summary SNAPSHOT segments, fragmentation and top allocation sites of a snapshot\n"
         "  summary DIR      one report across ranks (a folder of rank-<R>.pickle files)\n"
         "  html SNAPSHOT -o REPORT.html   an offline HTML report of a snapshot\n"
         "  html DIR -o REPORT.html        every rank on one axis; a click opens a rank's report\n"
         "  perfetto SNAPSHOT -o TRACE.json  counter tracks for ui.perfetto.dev\n"
         "  timeline SNAPSHOT -o OUT.json|OUT.html  memory by category over time (torch.profiler's layout)\n"
         "  slice SNAPSHOT (--time T0:T1 | --steps A:B | --max-entries N) -o OUT.pickle  a window for the "
         "viewer\n" GPUMEMPROF_CLI_DEMO_LINE
         "  help [COMMAND]   this text, or a command's options\n"
         "  --version        print the version\n"
         "Run 'gpumemprof <command> --help' (or -h) for a command's options.\n";
}

int run(int argc, char** argv) {
  namespace tools = gpumemprof::tools;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(usage(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "--version" || cmd == "-V" || cmd == "version") {
      std::printf("gpumemprof %s\n", GPUMEMPROF_VERSION_STRING);
      return 0;
    }
    if (cmd == "help") {
      if (argc < 3) {
        std::fputs(usage(), stdout);
        return 0;
      }
      // `help COMMAND` is `COMMAND --help`.
      char help_flag[] = "--help";
      char* help_argv[] = {argv[0], argv[2], help_flag, nullptr};
      return run(3, help_argv);
    }
    if (cmd == "replay") return tools::cmd_replay(argc, argv);
    if (cmd == "tune") return tools::cmd_tune(argc, argv);
    if (cmd == "diff") return tools::cmd_diff(argc, argv);
    if (cmd == "forecast") return tools::cmd_forecast(argc, argv);
    if (cmd == "reductions") return tools::cmd_reductions(argc, argv);
    if (cmd == "summary") return tools::cmd_summary(argc, argv);
    if (cmd == "html") return tools::cmd_html(argc, argv);
    if (cmd == "perfetto") return tools::cmd_perfetto(argc, argv);
    if (cmd == "timeline") return tools::cmd_timeline(argc, argv);
    if (cmd == "slice") return tools::cmd_slice(argc, argv);
    if (cmd == "demo") return run_demo_command(argc, argv);
    throw tools::UsageError("unknown command '" + cmd + "'; run 'gpumemprof --help'");
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "gpumemprof %s: %s\n", cmd.c_str(), e.what());
  } catch (const gpumemprof::OutOfMemoryError& e) {
    std::fprintf(stderr, "gpumemprof %s: %s\n", cmd.c_str(), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumemprof %s: error: %s\n", cmd.c_str(), e.what());
  }
  return 2;
}
}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
