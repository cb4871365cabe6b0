// One process, every contender, the same request streams: gpumemprof's caching allocator on a
// real GPU against PyTorch's c10 CUDACachingAllocator (when built with libtorch),
// cudaMallocAsync (stream-ordered pool) and plain cudaMalloc/cudaFree.
//
// Runs: fixed-size alloc+free pairs (512 B, 1 MiB, 64 MiB); thread runs (1/2/4/8/16 threads,
// each on its own CUDA stream, then all on one stream, 1 MiB + 64 KiB pairs); a random
// log-uniform stream, the same on two streams, and the recorded traces given on the command
// line, replayed on the streams they record (trace stream 0 is the default stream, every other
// id a stream created for it). Each trace is replayed cold once (peak reserved bytes) and then
// warm `repeat` times on the same allocator (best ns per pair), as PyTorch's own figures in
// RESULTS.md were measured. The results end in markdown tables for RESULTS.md.
//
// Contenders: gpumemprof with the default policy, with expandable_segments:True and with
// compacting_expandable_segments:True (gpumemprof-only; no parity line: c10 has no such policy), c10 with
// whatever PYTORCH_CUDA_ALLOC_CONF says and then (when it says nothing) with expandable_segments:True
// set in this process, cudaMallocAsync, cudaMalloc. `--c10-only` runs c10 alone (to cross-check
// the in-process switch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True gpu_compare --c10-only).
//
//   gpu_compare [--repeat N] [--c10-only] [--commit SHA] [--runs LIST] [--contenders LIST]
//               [--thread-repeat N] TRACE...
//
// --runs: which runs, of fixed,threads,traces (default: all three). --contenders: which of
// gmp,c10,async,malloc (default: all; gmp is both gpumemprof policies, c10 both of PyTorch's).
// --thread-repeat N: each thread run N times, the best kept (default 1).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "random_trace.hpp"
#include "replay.hpp"
#include "trace.hpp"

#if GPUMEMPROF_HAVE_TORCH
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace gmp = gpumemprof;
using Clock = std::chrono::steady_clock;

namespace {

// Peak allocated and reserved bytes and the device mallocs of one cold replay: the figures the
// default policy fixes exactly, for the parity check between the two caching allocators.
struct ExactFigures {
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::int64_t device_mallocs = 0;  // cumulative in the allocator; run_trace takes the difference
};

struct Gpumemprof {
  explicit Gpumemprof(const char* conf = "", const char* label = "gmp default")
      : name(label), a(backend(), gmp::AllocatorConfig(conf)) {}
  static gmp::AnyBackend backend() { return gmp::AnyBackend::for_device(gmp::Device("cuda:0")); }
  std::string name;
  gmp::DeviceAllocator a;
  void* alloc(std::size_t n, cudaStream_t s) { return a.allocate(n, gmp::Stream(s)); }
  void free(void* p, cudaStream_t /*s*/) { a.deallocate(p); }
  void reset() {
    a.empty_cache();
    a.reset_peak_memory_stats();
  }
  double peak_reserved_mib() { return static_cast<double>(a.memory_stats().reserved_bytes.all().peak) / 1048576.0; }
  ExactFigures exact() {
    const gmp::MemoryStats st = a.memory_stats();
    return {st.allocated_bytes.all().peak, st.reserved_bytes.all().peak, st.num_device_alloc};
  }
};

#if GPUMEMPROF_HAVE_TORCH
struct PytorchC10 {
  std::string name;
  // settings: PYTORCH_CUDA_ALLOC_CONF syntax applied in this process (c10 reads the variable once,
  // at start; c10::CachingAllocator::setAllocatorSettings changes it later, for new segments).
  explicit PytorchC10(const std::string& settings = "") {
    const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    name = conf != nullptr && *conf != '\0' ? std::string("c10 ") + conf : "c10 default";
    c10::cuda::CUDACachingAllocator::init(1);
    if (!settings.empty()) {
      c10::CachingAllocator::setAllocatorSettings(settings);
      name = settings == "expandable_segments:True" ? "c10 expandable" : "c10 " + settings;
    }
  }
  void* alloc(std::size_t n, cudaStream_t s) { return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(n, s); }
  void free(void* p, cudaStream_t /*s*/) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
  void reset() {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  }
  double peak_reserved_mib() {
    return static_cast<double>(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak) / 1048576.0;
  }
  ExactFigures exact() {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return {st.allocated_bytes[0].peak, st.reserved_bytes[0].peak, st.num_device_alloc};
  }
  // Whether a fresh 1 MiB block lands in an expandable segment (the setting took effect).
  bool allocates_expandable() {
    reset();
    void* p = alloc(1 << 20, nullptr);
    bool expandable = false;
    for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot().segments) expandable |= seg.is_expandable;
    free(p, nullptr);
    reset();
    return expandable;
  }
};
#endif

struct MallocAsync {
  std::string name = "cudaMallocAsync";
  cudaMemPool_t pool{};
  MallocAsync() {
    GPUMEMPROF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t keep = UINT64_MAX;  // cache freed memory, as PyTorch's async backend does
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  void* alloc(std::size_t n, cudaStream_t s) {
    void* p = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaMallocAsync(&p, n, s));
    return p;
  }
  void free(void* p, cudaStream_t s) { GPUMEMPROF_CUDA_CHECK(cudaFreeAsync(p, s)); }
  void reset() {
    GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    std::uint64_t zero = 0;
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  }
  double peak_reserved_mib() {
    std::uint64_t high = 0;
    GPUMEMPROF_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high));
    return static_cast<double>(high) / 1048576.0;
  }
};

struct PlainMalloc {
  std::string name = "cudaMalloc";
  void* alloc(std::size_t n, cudaStream_t /*s*/) {
    void* p = nullptr;
    GPUMEMPROF_CUDA_CHECK(cudaMalloc(&p, n));
    return p;
  }
  void free(void* p, cudaStream_t /*s*/) { GPUMEMPROF_CUDA_CHECK(cudaFree(p)); }
  void reset() {}
  double peak_reserved_mib() { return 0; }
};

// Every figure measured, kept for the markdown tables at the end.
struct Results {
  std::vector<std::string> columns;                                 // contenders, in run order
  std::vector<std::string> rows;                                    // row labels, in first-seen order
  std::map<std::pair<std::string, std::string>, std::string> cell;  // (row, column) -> text
  void put(const std::string& row, const std::string& column, const std::string& text) {
    if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
    cell[{row, column}] = text;
  }
  void print_table(const char* first_column, const std::string& prefix) const {
    std::printf("\n| %s |", first_column);
    for (const auto& c : columns) std::printf(" %s |", c.c_str());
    std::printf("\n|---|");
    for (std::size_t i = 0; i < columns.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (const auto& r : rows) {
      if (r.rfind(prefix, 0) != 0) continue;
      std::printf("| %s |", r.substr(prefix.size()).c_str());
      for (const auto& c : columns) {
        const auto it = cell.find({r, c});
        std::printf(" %s |", it == cell.end() ? "" : it->second.c_str());
      }
      std::printf("\n");
    }
  }
};

// The default policy and expandable_segments:True are PyTorch's, so on the same device and
// request stream our allocator and c10's must reach the same peak allocated and reserved bytes
// with the same number of device mallocs (maps, for expandable segments). Both run in this
// process, on cudaMalloc addresses of the same driver: the default policy breaks ties between
// equal-size free blocks by address, so this is the comparison that is exact for it (the
// simulated device hands out rising addresses, this driver falling ones for large segments).
// Expandable segments place blocks by offsets inside their reservations: exact anywhere.
// Returns the number of traces that differ.
int print_parity(const Results& res, const std::string& policy, const std::string& ours, const std::string& theirs) {
  int equal = 0, differ = 0;
  std::printf("\n%s parity with c10 (peak allocated, peak reserved, device mallocs of the cold replay):\n",
              policy.c_str());
  for (const auto& r : res.rows) {
    if (r.rfind("p:", 0) != 0) continue;
    const auto a = res.cell.find({r, ours}), b = res.cell.find({r, theirs});
    if (a == res.cell.end() || b == res.cell.end()) continue;
    const bool same = a->second == b->second;
    (same ? equal : differ) += 1;
    std::printf("%s parity %s: %s (%s: %s; %s: %s)\n", policy.c_str(), r.substr(2).c_str(), same ? "equal" : "DIFFERS",
                ours.c_str(), a->second.c_str(), theirs.c_str(), b->second.c_str());
  }
  std::printf("%s parity: %d equal, %d differ\n", policy.c_str(), equal, differ);
  return differ;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

template <class A>
double fixed_pairs(A& a, std::size_t size, int pairs) {
  for (int i = 0; i < 100; ++i) a.free(a.alloc(size, nullptr), nullptr);  // warm
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < pairs; ++i) a.free(a.alloc(size, nullptr), nullptr);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / pairs;
    best = std::min(best, ns);
  }
  return best;
}

// `threads` threads, each on its own stream (or all on one), all making pairs at once for
// `window` after a common start: per-thread ns per alloc+free pair (their mean), the slowest
// thread's, and the aggregate M pairs/s over the window. A fixed window rather than a fixed count:
// every thread runs the whole window, so the figure is that of N threads at once (with a count,
// threads that finish early leave the others alone for the rest, and runs of a few ms measure
// start-up more than the allocator).
struct ThreadFigures {
  double ns = 0, slowest_ns = 0, mpairs = 0;
};
template <class A>
ThreadFigures thread_run(A& a, int threads, bool one_stream, std::chrono::milliseconds window) {
  std::vector<cudaStream_t> streams(one_stream ? 1 : threads);
  for (auto& s : streams) GPUMEMPROF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Clock::time_point> t0(threads), t1(threads);
  std::vector<std::uint64_t> done(threads, 0);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      GPUMEMPROF_CUDA_CHECK(cudaSetDevice(0));
      cudaStream_t s = streams[one_stream ? 0 : k];
      auto pair = [&] {
        void* p = a.alloc(std::size_t{1} << 20, s);
        void* q = a.alloc(std::size_t{64} << 10, s);
        a.free(p, s);
        a.free(q, s);
      };
      for (int i = 0; i < 100; ++i) pair();  // warm: this stream's cache
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0;
      t0[k] = Clock::now();
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 16; ++i) pair();
        n += 16;
      }
      t1[k] = Clock::now();
      done[k] = n;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(window);
  stop.store(true, std::memory_order_relaxed);
  for (auto& t : pool) t.join();
  ThreadFigures f;
  double busy = 0, pairs = 0;
  for (int k = 0; k < threads; ++k) {
    const double ns = std::chrono::duration<double, std::nano>(t1[k] - t0[k]).count();
    busy += ns;
    pairs += 2.0 * static_cast<double>(done[k]);
    f.slowest_ns = std::max(f.slowest_ns, ns / (2.0 * static_cast<double>(std::max<std::uint64_t>(done[k], 1))));
  }
  f.ns = busy / pairs;
  const double span =
      std::chrono::duration<double>(*std::max_element(t1.begin(), t1.end()) - *std::min_element(t0.begin(), t0.end()))
          .count();
  f.mpairs = pairs / span / 1e6;
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  a.reset();  // the streams' cached blocks go before the streams do
  for (auto& s : streams) GPUMEMPROF_CUDA_CHECK(cudaStreamDestroy(s));
  return f;
}

template <class A>
double replay_once(A& a, const gmp::tools::Trace& t, const std::vector<cudaStream_t>& op_stream) {
  std::vector<void*> ptrs(t.id_count, nullptr);
  std::vector<cudaStream_t> on(t.id_count, nullptr);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const auto& op = t.ops[i];
    if (op.is_alloc) {
      ptrs[op.id] = a.alloc(op.bytes, op_stream[i]);
      on[op.id] = op_stream[i];
    } else {
      a.free(ptrs[op.id], on[op.id]);  // freed on the stream it was allocated on
      ptrs[op.id] = nullptr;
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(t.allocs);
  for (std::uint32_t id = 0; id < t.id_count; ++id) {
    if (ptrs[id] != nullptr) a.free(ptrs[id], on[id]);
  }
  return ns;
}

struct NamedTrace {
  std::string name;
  gmp::tools::Trace trace;
  std::vector<cudaStream_t> op_stream;  // the CUDA stream of each op
  std::size_t streams = 0;              // distinct streams it uses
  // The trace's streams, created for it; they outlive every contender (declared in main first).
  std::unique_ptr<gmp::tools::ReplayStreams> made;
};

template <class A>
void run_trace(A& a, const NamedTrace& nt, int repeat, Results& res) {
  a.reset();
  ExactFigures before{};
  if constexpr (requires { a.exact(); }) before = a.exact();
  replay_once(a, nt.trace, nt.op_stream);  // cold: the peak
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  const double peak = a.peak_reserved_mib();
  if constexpr (requires { a.exact(); }) {
    const ExactFigures e = a.exact();
    res.put("p:" + nt.name, a.name,
            std::to_string(e.peak_allocated) + " " + std::to_string(e.peak_reserved) + " " +
                std::to_string(e.device_mallocs - before.device_mallocs));
  }
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) best = std::min(best, replay_once(a, nt.trace, nt.op_stream));
  GPUMEMPROF_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("%-26s %-34s allocs=%8zu streams=%zu  ns/pair=%9.1f  peak_reserved_MiB=%9.1f\n", nt.name.c_str(),
              a.name.c_str(), nt.trace.allocs, nt.streams, best, peak);
  std::fflush(stdout);
  res.put("s:" + nt.name + " ns/pair", a.name, fmt("%.1f", best));
  res.put("s:" + nt.name + " peak reserved MiB", a.name, fmt("%.0f", peak));
}

NamedTrace named(gmp::tools::Trace t) {
  NamedTrace nt;
  nt.name = t.path.substr(t.path.find_last_of('/') + 1);
  if (const auto dot = nt.name.find(".trace"); dot != std::string::npos) nt.name.resize(dot);
  nt.made = std::make_unique<gmp::tools::ReplayStreams>(gmp::Device("cuda:0"), t);  // 0 stays the default stream
  std::vector<std::uint64_t> ids;
  nt.op_stream.resize(t.ops.size(), nullptr);
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    if (!t.ops[i].is_alloc) continue;
    nt.op_stream[i] = reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(t.ops[i].stream));
    if (std::find(ids.begin(), ids.end(), t.ops[i].stream) == ids.end()) ids.push_back(t.ops[i].stream);
  }
  nt.streams = ids.size();
  nt.trace = std::move(t);
  return nt;
}

// What to run (the command line's --runs, --contenders, --thread-repeat).
struct Plan {
  bool fixed = true, threads = true, traces = true;
  bool gmp = true, c10 = true, async = true, malloc = true;
  int thread_repeat = 1;
};

template <class A>
void run_all(A& a, const std::vector<NamedTrace>& traces, int repeat, bool slow, Results& res, const Plan& plan) {
  for (std::size_t size : {std::size_t{512}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    if (!plan.fixed) break;
    a.reset();
    const int pairs = slow ? 200 : 200000;  // cudaMalloc+cudaFree take ~100 us
    const double ns = fixed_pairs(a, size, pairs);
    std::printf("%-26s %-34s size=%9zu  ns/pair=%9.1f\n", "fixed", a.name.c_str(), size, ns);
    std::fflush(stdout);
    res.put(size == 512                      ? "s:fixed 512 B ns/pair"
            : size == (std::size_t{1} << 20) ? "s:fixed 1 MiB ns/pair"
                                             : "s:fixed 64 MiB ns/pair",
            a.name, fmt("%.1f", ns));
  }
  if (slow) return;
  for (bool one_stream : {false, true}) {
    for (int threads : {1, 2, 4, 8, 16}) {
      if (!plan.threads) break;
      const auto window = std::chrono::milliseconds(100);
      ThreadFigures f = thread_run(a, threads, one_stream, window);
      for (int r = 1; r < plan.thread_repeat; ++r) {  // the best run: the least disturbed
        const ThreadFigures g = thread_run(a, threads, one_stream, window);
        if (g.ns < f.ns) f = g;
      }
      std::printf("%-26s %-34s threads=%2d %s  ns/pair/thread=%9.1f  M pairs/s=%7.2f  slowest thread=%9.1f\n",
                  "threads 1 MiB+64 KiB", a.name.c_str(), threads, one_stream ? "one stream " : "own streams", f.ns,
                  f.mpairs, f.slowest_ns);
      std::fflush(stdout);
      res.put("t:" + std::to_string(threads) + (one_stream ? ", one stream" : ", own streams"), a.name,
              fmt("%.1f", f.ns) + " · " + fmt("%.2f", f.mpairs));
    }
  }
  if (!plan.traces) return;
  for (const auto& t : traces) run_trace(a, t, repeat, res);
}

// A comma-separated list of names, each one of `known`; false (and a message) otherwise.
bool parse_list(const std::string& option, const std::string& list, const std::vector<std::string>& known,
                std::vector<std::string>& out) {
  out.clear();
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, comma - at);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ",") + k;
      std::fprintf(stderr, "gpu_compare: %s: unknown name '%s' in '%s'; use a comma-separated list of %s\n",
                   option.c_str(), name.c_str(), list.c_str(), names.c_str());
      return false;
    }
    out.push_back(name);
    at = comma + 1;
  }
  return true;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  bool c10_only = false;
  std::string commit = std::getenv("GPUMEMPROF_COMMIT") != nullptr ? std::getenv("GPUMEMPROF_COMMIT") : "unknown";
  std::string command = "gpu_compare";
  std::vector<std::string> paths;
  Plan plan;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--runs" || arg == "--contenders") && i + 1 < argc) {
      const std::string list = argv[++i];
      std::vector<std::string> names;
      const bool runs = arg == "--runs";
      if (!parse_list(arg, list,
                      runs ? std::vector<std::string>{"fixed", "threads", "traces"}
                           : std::vector<std::string>{"gmp", "c10", "async", "malloc"},
                      names)) {
        return 2;
      }
      auto has = [&names](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
      if (runs) {
        plan.fixed = has("fixed"), plan.threads = has("threads"), plan.traces = has("traces");
      } else {
        plan.gmp = has("gmp"), plan.c10 = has("c10"), plan.async = has("async"), plan.malloc = has("malloc");
      }
      command += " " + arg + " " + list;
      continue;
    }
    if (arg == "--thread-repeat" && i + 1 < argc) {
      plan.thread_repeat = std::max(1, std::atoi(argv[++i]));
      command += " --thread-repeat " + std::to_string(plan.thread_repeat);
      continue;
    }
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
      command += " --repeat " + std::to_string(repeat);
      continue;
    }
    if (arg == "--commit" && i + 1 < argc) {
      commit = argv[++i];
      continue;
    }
    if (arg == "--c10-only") {
      c10_only = true;
    } else {
      paths.push_back(arg);
    }
    command += " " + arg;
  }
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF"); conf != nullptr && *conf != '\0') {
    command = "PYTORCH_CUDA_ALLOC_CONF=" + std::string(conf) + " " + command;
  }
  if (gmp::cuda_device_count() == 0) {  // after the options: a wrong one is told on any machine
    std::printf("no CUDA device: %s\n", gmp::cuda_unavailable_reason().c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  GPUMEMPROF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::string date = utc_now();
  std::printf("device: %s; warm replays: best of %d\n", prop.name, repeat);
  GPUMEMPROF_CUDA_CHECK(cudaFree(nullptr));  // create the context before timing anything
  std::vector<NamedTrace> traces;
  traces.push_back(named(gmp::tools::random_log_uniform(100000, 1, 1)));
  traces.push_back(named(gmp::tools::random_log_uniform(100000, 1, 2)));
  for (const auto& p : paths) traces.push_back(named(gmp::tools::load_trace(p)));
  Results res;
  if (c10_only) plan.gmp = plan.async = plan.malloc = false;
  if (plan.gmp) {
    Gpumemprof g;
    run_all(g, traces, repeat, false, res, plan);
  }
  if (plan.gmp) {
    Gpumemprof g("expandable_segments:True", "gmp expandable");
    run_all(g, traces, repeat, false, res, plan);
  }
#if GPUMEMPROF_HAVE_TORCH
  if (plan.c10) {
    PytorchC10 c;
    run_all(c, traces, repeat, false, res, plan);
    c.reset();
  }
  if (const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF"); plan.c10 && (conf == nullptr || *conf == '\0')) {
    PytorchC10 c("expandable_segments:True");
    if (c.allocates_expandable()) {
      run_all(c, traces, repeat, false, res, plan);
      c.reset();
    } else {
      std::printf(
          "c10: expandable_segments:True did not take effect in this process; run again with --c10-only "
          "and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n");
    }
  }
#else
  std::printf("(built without libtorch: no c10 contender)\n");
#endif
  // The gpumemprof-only variant (it must keep up with c10 expandable too), after c10: the
  // parity runs above see the driver as before.
  if (plan.gmp) {
    Gpumemprof g("compacting_expandable_segments:True", "gmp compacting");
    run_all(g, traces, repeat, false, res, plan);
  }
  if (plan.async) {
    MallocAsync m;
    run_all(m, traces, repeat, false, res, plan);
  }
  if (plan.malloc) {
    PlainMalloc p;
    run_all(p, traces, repeat, true, res, plan);
  }
  std::printf("\n### gpu_compare: %s, %s, commit %s\n\n`%s`\n", prop.name, date.c_str(), commit.c_str(),
              command.c_str());
  std::printf(
      "\nOne thread: fixed pairs on the default stream (best of 5 runs); traces on the streams they\n"
      "record (cold replay: peak reserved; best of %d warm replays: ns/pair).\n",
      repeat);
  res.print_table("stream", "s:");
  std::printf("\nThreads, 1 MiB + 64 KiB alloc/free pairs: per-thread ns/pair · aggregate M pairs/s.\n");
  res.print_table("threads", "t:");
  const int differ = print_parity(res, "default", "gmp default", "c10 default") +
                     print_parity(res, "expandable", "gmp expandable", "c10 expandable");
  return differ == 0 ? 0 : 1;
}
