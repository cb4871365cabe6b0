// The gpumemprof demo (see demo.hpp): a profiled MLP training loop.
#include "demo.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "demo_compute.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/export/formats/dump_snapshot.hpp"
#include "gpumemprof/export/reports/html_report.hpp"
#include "gpumemprof/export/formats/profile_export.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/integrations/nvtx.hpp"
#include "gpumemprof/profiler/leak_detector.hpp"
#include "gpumemprof/profiler/profiler.hpp"
#include "gpumemprof/profiler/tracker.hpp"

namespace gpumemprof_demo {
namespace {

namespace gmp = gpumemprof;

// ------------------------------------------------------------------------------------------------
// Devices and tensors

class SimulatedCompute final : public DemoCompute {
 public:
  [[nodiscard]] std::string name() const override { return "none (simulated device: allocations only)"; }
  [[nodiscard]] bool computes() const override { return false; }
  void upload(float* /*device*/, const std::vector<float>& /*host*/) override {}
  void zero(float* /*device*/, std::size_t /*count*/) override {}
  void gemm(bool /*ta*/, bool /*tb*/, int /*m*/, int /*n*/, int /*k*/, const float* /*a*/, const float* /*b*/,
            float* /*c*/) override {}
  void relu(const float* /*z*/, float* /*a*/, std::size_t /*count*/) override {}
  void relu_backward(const float* /*z*/, const float* /*da*/, float* /*dz*/, std::size_t /*count*/) override {}
  double mse(const float* /*z*/, const float* /*y*/, float* /*dz*/, int /*rows*/, int /*cols*/) override {
    return std::nan("");
  }
  void sgd_momentum(float* /*w*/, float* /*v*/, const float* /*g*/, std::size_t /*count*/, float /*lr*/,
                    float /*momentum*/) override {}
  void synchronize() override {}
};

/// A rows x cols float matrix in device memory from the device's caching allocator.
class Tensor {
 public:
  Tensor() = default;
  Tensor(gmp::DeviceAllocator& allocator, int rows, int cols)
      : allocator_(&allocator),
        rows_(rows),
        cols_(cols),
        data_(static_cast<float*>(allocator.allocate(size() * sizeof(float)))) {}
  Tensor(Tensor&& o) noexcept
      : allocator_(std::exchange(o.allocator_, nullptr)),
        rows_(o.rows_),
        cols_(o.cols_),
        data_(std::exchange(o.data_, nullptr)) {}
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = std::exchange(o.allocator_, nullptr);
      rows_ = o.rows_;
      cols_ = o.cols_;
      data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  void reset() {
    if (data_ != nullptr) allocator_->deallocate(data_);
    data_ = nullptr;
  }
  [[nodiscard]] float* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept {
    return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(cols_);
  }
  [[nodiscard]] bool empty() const noexcept { return data_ == nullptr; }

 private:
  gmp::DeviceAllocator* allocator_ = nullptr;
  int rows_ = 0;
  int cols_ = 0;
  float* data_ = nullptr;
};

// ------------------------------------------------------------------------------------------------
// The model

/// An MLP without biases: layer l maps widths[l] to widths[l + 1]; ReLU between layers.
class Mlp {
 public:
  Mlp(gmp::DeviceAllocator& allocator, DemoCompute& compute, const DemoOptions& options)
      : allocator_(allocator), compute_(compute), options_(options), widths_(options.layers), rng_(1234) {
    for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
      const int in = widths_[l];
      const int out = widths_[l + 1];
      weights_.emplace_back(allocator_, out, in);
      compute_.upload(weights_.back().data(), random_matrix(out, in, std::sqrt(6.0F / static_cast<float>(in + out))));
      momentum_.emplace_back();  // allocated by the first optimizer step, like torch.optim.SGD
    }
    // The function the network learns: y = x T^T for a fixed random T.
    target_ = random_matrix(widths_.back(), widths_.front(), 1.0F / std::sqrt(static_cast<float>(widths_.front())));
  }

  [[nodiscard]] std::size_t layers() const noexcept { return weights_.size(); }

  /// Everything one step keeps between its phases.
  struct Step {
    Tensor x, y;
    std::vector<Tensor> z;  // pre-activations, per layer
    std::vector<Tensor> a;  // activations of hidden layers
    Tensor dz_out;
    std::vector<Tensor> grads;
    double loss = std::nan("");
  };

  void load_batch(Step& s) {
    const int batch = options_.batch;
    const int in = widths_.front();
    const int out = widths_.back();
    s.x = Tensor(allocator_, batch, in);
    s.y = Tensor(allocator_, batch, out);
    if (!compute_.computes()) return;
    const std::vector<float> x = random_matrix(batch, in, 1.0F);
    std::vector<float> y(static_cast<std::size_t>(batch) * static_cast<std::size_t>(out), 0.0F);
    for (int r = 0; r < batch; ++r) {
      for (int c = 0; c < out; ++c) {
        float sum = 0.0F;
        for (int k = 0; k < in; ++k) sum += x[idx(r, k, in)] * target_[idx(c, k, in)];
        y[idx(r, c, out)] = sum;
      }
    }
    compute_.upload(s.x.data(), x);
    compute_.upload(s.y.data(), y);
  }

  void forward(Step& s) {
    const int batch = options_.batch;
    const float* input = s.x.data();
    for (std::size_t l = 0; l < layers(); ++l) {
      const int in = widths_[l];
      const int out = widths_[l + 1];
      s.z.emplace_back(allocator_, batch, out);
      compute_.gemm(false, true, batch, out, in, input, weights_[l].data(), s.z.back().data());
      if (l + 1 < layers()) {
        s.a.emplace_back(allocator_, batch, out);
        compute_.relu(s.z.back().data(), s.a.back().data(), s.a.back().size());
        input = s.a.back().data();
      }
    }
    s.dz_out = Tensor(allocator_, batch, widths_.back());
    s.loss = compute_.mse(s.z.back().data(), s.y.data(), s.dz_out.data(), batch, widths_.back());
  }

  /// Like autograd: each saved tensor is freed as soon as its last use is done.
  void backward(Step& s) {
    const int batch = options_.batch;
    s.grads.resize(layers());
    Tensor dz = std::move(s.dz_out);
    s.z.back().reset();  // the output is no longer needed once dz exists
    for (std::size_t l = layers(); l-- > 0;) {
      const int in = widths_[l];
      const int out = widths_[l + 1];
      const float* input = l == 0 ? s.x.data() : s.a[l - 1].data();
      s.grads[l] = Tensor(allocator_, out, in);
      compute_.gemm(true, false, out, in, batch, dz.data(), input, s.grads[l].data());
      if (l == 0) break;
      Tensor da(allocator_, batch, in);
      compute_.gemm(false, false, batch, in, out, dz.data(), weights_[l].data(), da.data());
      dz = Tensor(allocator_, batch, in);
      compute_.relu_backward(s.z[l - 1].data(), da.data(), dz.data(), dz.size());
      s.z[l - 1].reset();
      s.a[l - 1].reset();
    }
    s.x.reset();
    s.y.reset();
  }

  void optimizer_step(Step& s) {
    for (std::size_t l = 0; l < layers(); ++l) {
      if (momentum_[l].empty()) {
        momentum_[l] = Tensor(allocator_, widths_[l + 1], widths_[l]);
        compute_.zero(momentum_[l].data(), momentum_[l].size());
      }
      compute_.sgd_momentum(weights_[l].data(), momentum_[l].data(), s.grads[l].data(), weights_[l].size(),
                            options_.learning_rate, options_.momentum);
      s.grads[l].reset();  // zero_grad(set_to_none=True)
    }
  }

 private:
  static std::size_t idx(int r, int c, int cols) {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c);
  }
  std::vector<float> random_matrix(int rows, int cols, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> m(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
    for (float& v : m) v = u(rng_);
    return m;
  }

  gmp::DeviceAllocator& allocator_;
  DemoCompute& compute_;
  const DemoOptions& options_;
  std::vector<int> widths_;
  std::mt19937 rng_;
  std::vector<Tensor> weights_;
  std::vector<Tensor> momentum_;
  std::vector<float> target_;
};

// ------------------------------------------------------------------------------------------------

std::unique_ptr<DemoCompute> compute_for(const gmp::Device& device) {
  if (device.is_cuda()) return make_cuda_compute(device.index());
  if (device.is_simulated()) return std::make_unique<SimulatedCompute>();
  throw std::invalid_argument("the demo runs on a CUDA device or a simulated one (\"sim:N\"), not on " + device.str());
}

void write_outputs(const DemoOptions& options, const gmp::GPUMemoryProfiler& profiler,
                   gmp::DeviceAllocator& allocator) {
  namespace fs = std::filesystem;
  const fs::path dir(options.output_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw gmp::IoError("cannot create the output directory '" + dir.string() + "': " + ec.message());
  const auto path = [&](const char* name) { return (dir / name).string(); };
  gmp::export_profile(profiler, path("profile.json"));
  gmp::export_results(profiler.results(), path("results.csv"));
  gmp::export_snapshots(profiler.snapshots(), path("samples.csv"));
  const gmp::Snapshot snapshot = gmp::snapshot(allocator);
  gmp::write_snapshot_file(snapshot, path("snapshot.pickle"));
  gmp::write_html_report(snapshot, path("report.html"),
                         {.title = "gpumemprof demo: MLP training on " + profiler.device_name()});
  std::printf(
      "\nWrote %s: profile.json, results.csv, samples.csv, snapshot.pickle (pytorch.org/memory_viz), report.html\n",
      dir.string().c_str());
}

}  // namespace

int run_demo(const DemoOptions& options) {
  if (options.steps < 1 || options.batch < 1 || options.layers.size() < 2) {
    throw std::invalid_argument("the demo needs at least one step, a batch of one row and two layer widths");
  }
  const gmp::Device device = options.device.empty() ? gmp::Device() : gmp::Device(options.device);
  gmp::DeviceAllocator& allocator = gmp::default_allocator(device);
  const std::unique_ptr<DemoCompute> compute = compute_for(device);

  // Allocation history with C++ stacks, for the snapshot and the report (and the leak sites).
  gmp::record_memory_history(gmp::HistoryOptions{.max_entries = 100'000}, device);
  gmp::GPUMemoryProfiler profiler({.device = device, .track_cpu_memory = true});
  gmp::MemoryTracker tracker(allocator, {.interval = options.monitor_interval});
  gmp::LeakDetector leaks(profiler.source());

  std::printf("gpumemprof demo on %s, math: %s%s\n", device.str().c_str(), compute->name().c_str(),
              gmp::nvtx_scope_ranges_enabled() ? "; NVTX ranges on" : "");
  std::printf("MLP");
  for (const int w : options.layers) std::printf(" %d", w);
  std::printf(", batch %d, %d steps%s\n\n", options.batch, options.steps,
              options.leak_bytes_per_step != 0
                  ? (", leaking " + gmp::format_size(options.leak_bytes_per_step) + " per step").c_str()
                  : "");

  profiler.start_monitoring(options.monitor_interval);
  tracker.start_tracking();
  std::vector<Tensor> leaked;
  std::optional<Mlp> model;
  profiler.profile_function("model_init", [&] { model.emplace(allocator, *compute, options); });
  for (int step = 0; step < options.steps; ++step) {
    auto step_call = leaks.track("train_step");
    auto step_scope = profiler.profile_context("train_step");
    Mlp::Step s;
    profiler.profile_function("data_loading", [&] { model->load_batch(s); });
    profiler.profile_function("forward", [&] { model->forward(s); });
    profiler.profile_function("backward", [&] { model->backward(s); });
    profiler.profile_function("optimizer", [&] { model->optimizer_step(s); });
    if (options.leak_bytes_per_step != 0) {
      leaked.emplace_back(allocator, 1,
                          static_cast<int>((options.leak_bytes_per_step + sizeof(float) - 1) / sizeof(float)));
    }
    const gmp::ProfileResult r = step_scope.stop();
    step_call.end();
    if (!options.quiet) {
      // The loss only where the math runs (the simulated device allocates, computes nothing).
      const std::string loss = compute->computes() ? "  loss " + std::to_string(s.loss) : "";
      std::printf("step %3d%s  %10s  allocated %10s  peak %10s\n", step, loss.c_str(),
                  gmp::format_seconds(r.execution_time).c_str(),
                  gmp::format_size(static_cast<std::uint64_t>(r.memory_after.allocated_memory)).c_str(),
                  gmp::format_size(static_cast<std::uint64_t>(r.peak_memory_usage())).c_str());
    }
  }
  compute->synchronize();
  tracker.stop_tracking();
  profiler.stop_monitoring();

  std::printf("\n%s", profiler.format_summary().c_str());
  std::printf("\nLeak check over %d steps: %s", options.steps, leaks.report().format().c_str());
  const gmp::TrackingStatistics ts = tracker.get_statistics();
  std::printf("\nTracker: %llu samples, %llu events, %llu alerts, peak %s of %s\n",
              static_cast<unsigned long long>(ts.samples), static_cast<unsigned long long>(ts.events),
              static_cast<unsigned long long>(ts.alert_count),
              gmp::format_size(static_cast<std::uint64_t>(ts.peak_memory)).c_str(),
              gmp::format_size(static_cast<std::uint64_t>(ts.capacity)).c_str());
  for (const auto& e : tracker.get_events(gmp::TrackingEventType::warning, 5))
    std::printf("  warning: %s\n", e.message.c_str());
  for (const auto& e : tracker.get_events(gmp::TrackingEventType::critical, 5))
    std::printf("  critical: %s\n", e.message.c_str());

  if (!options.output_dir.empty()) write_outputs(options, profiler, allocator);
  leaked.clear();
  model.reset();
  return 0;
}

struct DemoTrainer::Impl {
  explicit Impl(const DemoOptions& o)
      : options(o),
        device(o.device.empty() ? gmp::Device() : gmp::Device(o.device)),
        compute(compute_for(device)),
        model(gmp::default_allocator(device), *compute, options) {}
  DemoOptions options;  // the model keeps a reference: owned here
  gmp::Device device;
  std::unique_ptr<DemoCompute> compute;
  Mlp model;
};

DemoTrainer::DemoTrainer(const DemoOptions& options) : impl_(std::make_unique<Impl>(options)) {}
DemoTrainer::~DemoTrainer() = default;

double DemoTrainer::step() {
  Mlp::Step s;
  impl_->model.load_batch(s);
  impl_->model.forward(s);
  impl_->model.backward(s);
  impl_->model.optimizer_step(s);
  impl_->compute->synchronize();
  return s.loss;
}

const char* demo_usage() {
  return "options:\n"
         "  --device D        cuda:N or sim:N (default: the current device, sim:0 without a GPU)\n"
         "  --steps N         training steps (default 20)\n"
         "  --batch N         rows per batch (default 64)\n"
         "  --layers W,W,...  layer widths, input first (default 784,1024,1024,10)\n"
         "  --lr X            learning rate (default 0.02)\n"
         "  --leak-mib N      leak N MiB per step, to see the leak detector find it\n"
         "  --output DIR      where to write the files (default demo-out)\n"
         "  --no-output       write no files\n"
         "  --monitor-ms N    sampling period of the monitor and the tracker (default 5)\n"
         "  --quiet           no per-step lines\n";
}

DemoOptions parse_demo_args(int argc, const char* const* argv, int first) {
  DemoOptions o;
  const auto number = [](std::string_view option, std::string_view text) {
    long long v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
      throw std::invalid_argument("option " + std::string(option) + " needs a non-negative integer, got \"" +
                                  std::string(text) + "\"");
    }
    return v;
  };
  for (int i = first; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const auto need = [&]() -> std::string_view {
      if (has_value) return value;
      if (i + 1 >= argc) throw std::invalid_argument("option " + std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--device") {
      o.device = need();
    } else if (arg == "--steps") {
      o.steps = static_cast<int>(number(arg, need()));
    } else if (arg == "--batch") {
      o.batch = static_cast<int>(number(arg, need()));
    } else if (arg == "--layers") {
      o.layers.clear();
      std::string_view list = need();
      while (!list.empty()) {
        const auto comma = list.find(',');
        o.layers.push_back(static_cast<int>(number(arg, list.substr(0, comma))));
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
    } else if (arg == "--lr") {
      const std::string text(need());
      std::size_t used = 0;
      try {
        o.learning_rate = std::stof(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() || text.empty())
        throw std::invalid_argument("option --lr needs a number, got \"" + text + "\"");
    } else if (arg == "--leak-mib") {
      o.leak_bytes_per_step = static_cast<std::size_t>(number(arg, need())) << 20;
    } else if (arg == "--output") {
      o.output_dir = need();
    } else if (arg == "--no-output" && !has_value) {
      o.output_dir.clear();
    } else if (arg == "--monitor-ms") {
      o.monitor_interval = std::chrono::milliseconds(std::max<long long>(1, number(arg, need())));
    } else if (arg == "--quiet" && !has_value) {
      o.quiet = true;
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg));
    }
  }
  return o;
}

#if !GPUMEMPROF_DEMO_CUDA
std::unique_ptr<DemoCompute> make_cuda_compute(int device) {
  throw std::invalid_argument("this demo was built without CUDA and cuBLAS, so it cannot run on cuda:" +
                              std::to_string(device) + "; use --device sim:0");
}
#endif

}  // namespace gpumemprof_demo
