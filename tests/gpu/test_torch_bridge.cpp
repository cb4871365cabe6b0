// The PyTorch bridge's C functions (python/gpumemprof_torch.h) on a real GPU, called as PyTorch
// and python/gpumemprof_torch call them.
#include "gpumemprof_torch.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.hpp"

namespace {
constexpr ssize_t MiB = ssize_t{1} << 20;

std::string stats_json(int device) {
  const ssize_t n = gpumemprof_memory_stats_json(device, nullptr, 0);
  REQUIRE(n > 0);
  std::string text(static_cast<std::size_t>(n) + 1, '\0');
  REQUIRE(gpumemprof_memory_stats_json(device, text.data(), text.size()) == n);
  text.resize(static_cast<std::size_t>(n));
  return text;
}
}  // namespace

TEST_CASE("the bridge allocates device memory, counts it, and frees it") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  int64_t before[6];
  REQUIRE(gpumemprof_counters(0, before) == 0);
  const uint64_t window = gpumemprof_open_peak_window(0);
  REQUIRE(window != 0);

  void* p = gpumemprof_malloc(3 * MiB, 0, stream);
  REQUIRE(p != nullptr);
  REQUIRE(cudaMemsetAsync(p, 0x5a, static_cast<std::size_t>(3 * MiB), stream) == cudaSuccess);
  unsigned char last = 0;
  REQUIRE(cudaMemcpyAsync(&last, static_cast<unsigned char*>(p) + 3 * MiB - 1, 1, cudaMemcpyDeviceToHost, stream) ==
          cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(last == 0x5a);

  int64_t during[6];
  REQUIRE(gpumemprof_counters(0, during) == 0);
  CHECK(during[0] - before[0] == 3 * MiB);
  CHECK(during[2] - before[2] == 1);
  CHECK(during[1] >= during[0]);
  CHECK(stats_json(0).find("\"allocated_bytes.all.current\":" + std::to_string(during[0])) != std::string::npos);

  CHECK(gpumemprof_record_stream(p, 0, nullptr) == 0);
  gpumemprof_free(p, 3 * MiB, 0, stream);
  CHECK(gpumemprof_close_peak_window(0, window) >= before[0] + 3 * MiB);
  int64_t after[6];
  REQUIRE(gpumemprof_counters(0, after) == 0);
  CHECK(after[0] == before[0]);
  CHECK(after[3] - before[3] == 1);
  CHECK(gpumemprof_malloc(0, 0, stream) == nullptr);  // PyTorch's own allocator gives none either
  CHECK(std::string(gpumemprof_last_error()).empty());
  CHECK(gpumemprof_empty_cache(0) == 0);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("the bridge writes a snapshot with history") {
  REQUIRE(gpumemprof_record_memory_history(0, 2, 1000) == 0);
  void* p = gpumemprof_malloc(MiB, 0, nullptr);
  REQUIRE(p != nullptr);
  const auto path = std::filesystem::temp_directory_path() / "gpumemprof_torch_bridge.pickle";
  REQUIRE(gpumemprof_dump_snapshot(0, path.c_str()) == 0);
  std::ifstream in(path, std::ios::binary);
  char magic[2] = {};
  in.read(magic, 2);
  CHECK(static_cast<unsigned char>(magic[0]) == 0x80);  // a pickle (PROTO opcode)
  CHECK(std::filesystem::file_size(path) > 100);
  std::filesystem::remove(path);
  gpumemprof_free(p, MiB, 0, nullptr);
  CHECK(gpumemprof_record_memory_history(0, 0, 0) == 0);
}

TEST_CASE("bridge errors return error values with a message, never throw (a real OOM among them)") {
  CHECK(gpumemprof_malloc(ssize_t{1} << 50, 0, nullptr) == nullptr);  // 1 PiB: out of memory
  CHECK(std::string(gpumemprof_last_error()).find("gpumemprof_malloc") == 0);
  int foreign = 0;
  gpumemprof_free(&foreign, 4, 0, nullptr);
  CHECK_FALSE(std::string(gpumemprof_last_error()).empty());
  CHECK(gpumemprof_record_memory_history(0, 7, 0) == -1);
  CHECK(gpumemprof_dump_snapshot(0, "/nonexistent-dir/x.pickle") == -1);
  CHECK(std::string(gpumemprof_last_error()).find("/nonexistent-dir") != std::string::npos);
  CHECK(gpumemprof_memory_stats_json(99, nullptr, 0) == -1);  // no such device
  CHECK(gpumemprof_close_peak_window(0, 123456789) == -1);
}

TEST_CASE("the bridge tags allocations with categories by pointer and by thread scope") {
  const auto category_json = [] {
    const ssize_t n = gpumemprof_category_stats_json(0, nullptr, 0);
    REQUIRE(n > 0);
    std::string text(static_cast<std::size_t>(n) + 1, '\0');
    REQUIRE(gpumemprof_category_stats_json(0, text.data(), text.size()) == n);
    text.resize(static_cast<std::size_t>(n));
    return text;
  };
  REQUIRE(gpumemprof_reset_category_peaks(0) == 0);
  void* w = gpumemprof_malloc(3 * MiB + 100, 0, nullptr);
  REQUIRE(w != nullptr);
  REQUIRE(gpumemprof_push_category("bridge_input") == 0);
  void* x = gpumemprof_malloc(5000, 0, nullptr);
  REQUIRE(gpumemprof_pop_category() == 0);
  CHECK(gpumemprof_pop_category() == -1);  // nothing pushed
  CHECK(std::string(gpumemprof_last_error()).find("no category was pushed") != std::string::npos);
  CHECK(gpumemprof_set_category(w, 0, "bridge_parameter", 0) == 1);
  CHECK(gpumemprof_set_category(x, 0, "bridge_activation", 1) == 0);                          // tagged: kept
  CHECK(gpumemprof_set_category(static_cast<char*>(w) + 512, 0, "bridge_gradient", 0) == 0);  // not a block start
  const std::string json = category_json();
  CHECK(json.find("\"bridge_parameter\":{\"current\":" + std::to_string(3 * MiB + 100)) != std::string::npos);
  // A small-pool allocation's block is its size rounded up to 512 bytes (allocated_*).
  CHECK(json.find("\"bridge_input\":{\"current\":5000,\"peak\":5000,\"allocated_current\":5120,"
                  "\"allocated_peak\":5120}") != std::string::npos);
  CHECK(json.find("bridge_activation") == std::string::npos);
  CHECK(json.find("bridge_gradient") == std::string::npos);
  gpumemprof_free(x, 5000, 0, nullptr);
  gpumemprof_free(w, 3 * MiB + 100, 0, nullptr);
  CHECK(category_json().find("\"bridge_parameter\":{\"current\":0,\"peak\":" + std::to_string(3 * MiB + 100)) !=
        std::string::npos);
}

namespace {
std::int64_t stat_of(int device, const std::string& key) {
  const std::string json = stats_json(device);
  const std::string needle = "\"" + key + "\":";
  const std::size_t at = json.find(needle);
  REQUIRE(at != std::string::npos);
  return std::stoll(json.substr(at + needle.size()));
}
}  // namespace

TEST_CASE("the bridge answers torch.cuda's resets, memory fraction and multi-device snapshot") {
  void* p = gpumemprof_malloc(8 * MiB, 0, nullptr);
  REQUIRE(p != nullptr);
  gpumemprof_free(p, 8 * MiB, 0, nullptr);
  CHECK(stat_of(0, "allocated_bytes.all.peak") >= 8 * MiB);
  REQUIRE(gpumemprof_reset_peak_memory_stats(0) == 0);
  CHECK(stat_of(0, "allocated_bytes.all.peak") == stat_of(0, "allocated_bytes.all.current"));
  REQUIRE(gpumemprof_reset_accumulated_memory_stats(0) == 0);
  CHECK(stat_of(0, "allocated_bytes.all.allocated") == 0);
  CHECK(stat_of(0, "allocation.all.freed") == 0);
  CHECK(stat_of(0, "num_device_alloc") == 0);

  int devices[64];
  const int n = gpumemprof_devices_in_use(devices, 64);
  REQUIRE(n >= 1);
  CHECK(devices[0] == 0);

  // A memory fraction caps what the device may reserve; with raising on, the failure is an exception.
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(gpumemprof_set_memory_fraction(0, 0.25) == 0);
  CHECK(gpumemprof_malloc(static_cast<ssize_t>(total / 2), 0, nullptr) == nullptr);
  CHECK(std::string(gpumemprof_last_error()).find("out of memory") != std::string::npos);
  gpumemprof_raise_on_error(1);
  CHECK_THROWS_WITH(gpumemprof_malloc(static_cast<ssize_t>(total / 2), 0, nullptr),
                    Catch::Matchers::Contains("out of memory"));
  gpumemprof_raise_on_error(0);
  REQUIRE(gpumemprof_set_memory_fraction(0, 1.0) == 0);
  CHECK(gpumemprof_set_memory_fraction(0, 1.5) == -1);

  // History in PyTorch's words for every device in use; the snapshot of every device.
  CHECK(gpumemprof_history("all", "all", "everything", 0, 0) == -1);
  CHECK(std::string(gpumemprof_last_error()).find("stacks") != std::string::npos);
  REQUIRE(gpumemprof_history("all", "all", "python", 1000, 1) == 0);  // no interpreter here: C++ frames
  void* q = gpumemprof_malloc(MiB, 0, nullptr);
  REQUIRE(q != nullptr);
  const auto path = std::filesystem::temp_directory_path() / "gpumemprof_torch_devices.pickle";
  REQUIRE(gpumemprof_dump_snapshot_devices(path.c_str()) == 0);
  CHECK(std::filesystem::file_size(path) > 100);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(bytes.find("filename") != std::string::npos);  // frames: C++ ones, as no interpreter hooks in
  std::filesystem::remove(path);
  gpumemprof_free(q, MiB, 0, nullptr);
  REQUIRE(gpumemprof_history("", "all", "python", 0, 0) == 0);
}

TEST_CASE("the bridge's graph hooks around a real capture on two streams, replayed 100 times", "[graphs]") {
  // As torch.cuda.graph calls them: beginAllocateToPool with a filter over the capture id, then
  // cudaStreamBeginCapture (global mode), allocations and frees inside, cudaStreamEndCapture,
  // endAllocateToPool; the graph's destruction is releasePool.
  cudaStream_t s = nullptr;
  cudaStream_t s2 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  int64_t before[6];
  REQUIRE(gpumemprof_counters(0, before) == 0);
  unsigned long long capture_id = 0;
  const std::pair<unsigned long long, unsigned long long> pool{901, 0};
  gpumemprof_begin_allocate_to_pool(0, pool, [&capture_id](cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    return cudaStreamGetCaptureInfo(stream, &status, &id) == cudaSuccess && status == cudaStreamCaptureStatusActive &&
           id == capture_id;
  });
  REQUIRE(std::string(gpumemprof_last_error()).empty());
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamGetCaptureInfo(s, &status, &capture_id) == cudaSuccess);
  void* a = gpumemprof_malloc(4 * MiB, 0, s);  // a new segment of the graph's pool
  void* q = gpumemprof_malloc(1 * MiB, 0, s);
  CHECK(cudaMemsetAsync(a, 1, static_cast<std::size_t>(4 * MiB), s) == cudaSuccess);
  CHECK(cudaMemcpyAsync(q, a, static_cast<std::size_t>(1 * MiB), cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  gpumemprof_free(a, 4 * MiB, 0, s);  // freed inside the capture: its next allocation reuses it
  void* r = gpumemprof_malloc(4 * MiB, 0, s);
  CHECK(r == a);
  CHECK(cudaMemsetAsync(r, 2, static_cast<std::size_t>(4 * MiB), s) == cudaSuccess);
  CHECK(cudaEventRecord(fork, s) == cudaSuccess);  // s2 joins the capture
  CHECK(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
  void* t = gpumemprof_malloc(2 * MiB, 0, s2);
  CHECK(cudaMemsetAsync(t, 3, static_cast<std::size_t>(2 * MiB), s2) == cudaSuccess);
  CHECK(cudaEventRecord(join, s2) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);  // the capture stayed valid
  gpumemprof_end_allocate_to_pool(0, pool);
  CHECK(std::string(gpumemprof_last_error()).empty());
  REQUIRE(q != nullptr);
  REQUIRE(r != nullptr);
  REQUIRE(t != nullptr);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 100; ++i) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  unsigned char got[3] = {0, 0, 0};
  REQUIRE(cudaMemcpy(&got[0], static_cast<unsigned char*>(q) + MiB - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&got[1], static_cast<unsigned char*>(r) + 4 * MiB - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&got[2], static_cast<unsigned char*>(t) + 2 * MiB - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got[0] == 1);
  CHECK(got[1] == 2);
  CHECK(got[2] == 3);
  int64_t during[6];
  REQUIRE(gpumemprof_counters(0, during) == 0);
  CHECK(during[1] > before[1]);  // the graph's pool holds memory
  // The graph destroyed and its memory freed: the pool's segments go back.
  for (void* p : {q, r, t}) gpumemprof_free(p, 0, 0, s);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  gpumemprof_release_pool(0, pool);
  CHECK(std::string(gpumemprof_last_error()).empty());
  int64_t after[6];
  REQUIRE(gpumemprof_counters(0, after) == 0);
  CHECK(after[0] == before[0]);
  CHECK(after[1] == before[1]);
  gpumemprof_release_pool(0, pool);  // once too often: one line on stderr, no exception
  CHECK(std::string(gpumemprof_last_error()).find("releasePool") == 0);
  // libtorch's own emptyCache (set_reset_fn): every device's cache goes back.
  gpumemprof_free(gpumemprof_malloc(8 * MiB, 0, s), 0, 0, s);
  int64_t cached[6];
  REQUIRE(gpumemprof_counters(0, cached) == 0);
  gpumemprof_empty_cache_all();
  CHECK(std::string(gpumemprof_last_error()).empty());
  int64_t emptied[6];
  REQUIRE(gpumemprof_counters(0, emptied) == 0);
  CHECK(emptied[1] <= cached[1] - 8 * MiB);
  for (cudaEvent_t e : {fork, join}) cudaEventDestroy(e);
  for (cudaStream_t x : {s, s2}) cudaStreamDestroy(x);
}
