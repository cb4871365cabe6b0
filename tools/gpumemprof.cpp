// The gpumemprof command-line tool. Bad input gets one clear line on stderr and exit code 2.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "cli_args.hpp"
#include "cmd_replay.hpp"
#include "cmd_snapshot.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

namespace {
const char* usage() {
  return "usage: gpumemprof <command> [options]\n"
         "commands:\n"
         "  replay TRACE     replay an allocation trace through the caching allocator\n"
         "  summary SNAPSHOT segments, fragmentation and top allocation sites of a snapshot\n"
         "  html SNAPSHOT -o REPORT.html   an offline HTML report of a snapshot\n"
         "  --version        print the version\n"
         "Run 'gpumemprof <command> --help' for a command's options.\n";
}
}  // namespace

int main(int argc, char** argv) {
  namespace tools = gpumemprof::tools;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(usage(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "--version") {
      std::printf("gpumemprof %s\n", GPUMEMPROF_VERSION_STRING);
      return 0;
    }
    if (cmd == "replay") return tools::cmd_replay(argc, argv);
    if (cmd == "summary") return tools::cmd_summary(argc, argv);
    if (cmd == "html") return tools::cmd_html(argc, argv);
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
