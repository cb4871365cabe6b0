// GPU test runner: exits 77 (Meson's "skipped") when no CUDA device is visible.
#include <cstdio>

#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif
#include "gpumemprof/device/cuda.hpp"

int main(int argc, char** argv) {
  if (gpumemprof::cuda_device_count() == 0) {
    std::printf("no CUDA device visible (%s): GPU tests skipped\n", gpumemprof::cuda_unavailable_reason().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
