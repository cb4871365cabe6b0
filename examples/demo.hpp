// The gpumemprof demo: a small MLP trained with SGD + momentum, every phase of every step a
// profiled scope, the monitor and the tracker sampling in the background, a leak detector
// following the steps. On a CUDA device the math runs with cuBLAS (ReLU kernels when the build
// compiled demo_kernels.cu); on a simulated device the same tensors are allocated -- same
// shapes, same order, same sizes -- and the math is skipped.
//
// At the end it prints the profiler's summary table, the leak report and the tracker's events,
// and writes into `output_dir`: profile.json and results.csv (the profiler's data),
// snapshot.pickle (open in pytorch.org/memory_viz) and report.html.
//
// Called by examples/demo_main.cpp (gpumemprof-demo) and by `gpumemprof demo`.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpumemprof_demo {

struct DemoOptions {
  /// "cuda:0", "sim:0", ...; empty: the current device (a visible GPU, else sim:0).
  std::string device;
  /// Training steps.
  int steps = 20;
  /// Rows per batch.
  int batch = 64;
  /// Layer widths, input first: {784, 1024, 1024, 10} is a 3-layer MLP.
  std::vector<int> layers = {784, 1024, 1024, 10};
  float learning_rate = 0.02F;
  float momentum = 0.9F;
  /// Bytes deliberately leaked per step (0: none), to show the leak detector at work.
  std::size_t leak_bytes_per_step = 0;
  /// Where the files go; empty: write none.
  std::string output_dir = "demo-out";
  /// Background sampling period of the profiler's monitor and of the tracker.
  std::chrono::milliseconds monitor_interval{5};
  /// Print only the final summary (no per-step lines).
  bool quiet = false;
};

/// The demo's model and its training step without the profiler, monitor and files: for budget
/// tests and benchmarks. The constructor allocates the weights on `options.device` (the
/// momentum buffers come with the first step, like torch.optim.SGD); step() runs one training
/// step (data loading, forward, backward, optimizer) and returns its loss (NaN on a simulated
/// device). Every step allocates the same tensors as run_demo's steps.
class DemoTrainer {
 public:
  explicit DemoTrainer(const DemoOptions& options);
  ~DemoTrainer();
  DemoTrainer(const DemoTrainer&) = delete;
  DemoTrainer& operator=(const DemoTrainer&) = delete;
  double step();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Runs the demo; returns a process exit code (0 on success). Errors (an unknown device, a
/// CUDA device in a build without cuBLAS, a file that cannot be written) throw.
int run_demo(const DemoOptions& options);

/// The demo's command-line options in words, for --help.
const char* demo_usage();

/// Parses `--device D --steps N --batch N --layers 784,1024,10 --lr X --leak-mib N
/// --output DIR --no-output --monitor-ms N --quiet` starting at argv[first]. Throws
/// std::invalid_argument naming the bad option.
DemoOptions parse_demo_args(int argc, const char* const* argv, int first = 1);

}  // namespace gpumemprof_demo
