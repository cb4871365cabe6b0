// gpumemprof-demo: runs the demo (demo.hpp) with options from the command line.
#include <cstdio>
#include <cstring>
#include <exception>

#include "demo.hpp"

int main(int argc, char** argv) {
  namespace demo = gpumemprof_demo;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: gpumemprof-demo [options]\n%s", demo::demo_usage());
      return 0;
    }
  }
  try {
    return demo::run_demo(demo::parse_demo_args(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gpumemprof-demo: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumemprof-demo: error: %s\n", e.what());
    return 1;
  }
}
