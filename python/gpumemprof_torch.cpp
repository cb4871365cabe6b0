// libgpumemprof_torch.so: gpumemprof's caching allocator behind PyTorch's pluggable-allocator C
// ABI (see gpumemprof_torch.h). Exceptions stop here: PyTorch calls these through plain C.
#include "gpumemprof_torch.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/export/formats/dump_snapshot.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/history_recorder.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "python_frames.h"
#include "torch_pool_hooks.hpp"

namespace gmp = gpumemprof;

namespace {

// A plain array, never destroyed: PyTorch frees tensors from its own static destructors at exit,
// after this thread's thread_local objects are gone, and every call here touches this message.
thread_local char last_error[1024];

// The calling thread's pushed categories (gpumemprof_push_category): plain arrays for the same
// reason as last_error.
constexpr int kMaxCategoryDepth = 64;
thread_local std::uint32_t saved_categories[kMaxCategoryDepth];
thread_local int category_depth = 0;

void set_last_error(const std::string& text) { std::snprintf(last_error, sizeof last_error, "%s", text.c_str()); }

/// The variable that configures the bridge's allocators and its value: $GPUMEMPROF_ALLOC_CONF,
/// else PyTorch's own (what PyTorch users already set). Read once.
const std::pair<std::string, std::string>& alloc_conf() {
  static const std::pair<std::string, std::string> conf = [] {
    for (const char* name : {"GPUMEMPROF_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
      if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
        return std::pair<std::string, std::string>(name, value);
      }
    }
    return std::pair<std::string, std::string>();
  }();
  return conf;
}

// gpumemprof_raise_on_error: malloc failures throw (under PyTorch) instead of returning NULL.
std::atomic<bool> raise_on_oom{false};

// The allocator serving each CUDA device index the bridge has used (served, read or configured),
// null until its first use; and the history options that PyTorch's _record_memory_history asked
// for: they apply to every such device, and to each device when it is first used (PyTorch records
// every device). Every call after the first reads its allocator here with one load: no device
// check (Device::cuda asks the CUDA runtime for the device count) and no slot lookup per
// allocation and free, which PyTorch's own allocator does not pay either.
std::atomic<gmp::DeviceAllocator*> served[gmp::detail::max_cuda_devices];
std::mutex history_mutex;
bool history_wanted = false;  // guarded by history_mutex
gmp::HistoryOptions wanted_history;

/// Calls `f(d)` for each device the bridge has used, ascending.
template <class F>
void for_each_device_in_use(F&& f) {
  for (int d = 0; d < gmp::detail::max_cuda_devices; ++d) {
    if (served[d].load(std::memory_order_acquire) != nullptr) f(d);
  }
}

/// allocator_of's first call for `device` (and every call with an index out of range, which
/// Device::cuda explains): configures, finds or creates the allocator, and starts history on it
/// when PyTorch asked for history before.
[[gnu::noinline]] gmp::DeviceAllocator& first_use(int device) {
  // Before the first allocator exists: the default allocators read $GPUMEMPROF_ALLOC_CONF, so
  // PyTorch's variable is handed on through it, checked first so that an error names it.
  static const bool configured = [] {
    const auto& [name, value] = alloc_conf();
    if (name.empty()) return true;
    gmp::AllocatorConfig parsed;
    try {
      parsed = gmp::AllocatorConfig::parse(value);
    } catch (const gmp::ConfigError& e) {
      if (name == "GPUMEMPROF_ALLOC_CONF") throw;
      throw gmp::ConfigError("$" + name + "='" + value + "' (which gpumemprof follows while $GPUMEMPROF_ALLOC_CONF " +
                             "is unset): " + e.what());
    }
    // PyTorch's keys that gpumemprof accepts and does not use: one line each, once.
    for (const std::string& line : parsed.ignored)
      std::fprintf(stderr, "gpumemprof_torch: $%s: %s\n", name.c_str(), line.c_str());
    if (name != "GPUMEMPROF_ALLOC_CONF") ::setenv("GPUMEMPROF_ALLOC_CONF", value.c_str(), 0);
    return true;
  }();
  (void)configured;
  gmp::DeviceAllocator& a = gmp::default_allocator(gmp::Device::cuda(device));  // checks the index
  std::lock_guard lock(history_mutex);
  if (served[device].load(std::memory_order_relaxed) == nullptr) {
    if (history_wanted) gmp::record_memory_history(wanted_history, gmp::Device::cuda(device));
    served[device].store(&a, std::memory_order_release);
  }
  return a;
}

gmp::DeviceAllocator& allocator_of(int device) {
  if (GPUMEMPROF_LIKELY(static_cast<unsigned>(device) < static_cast<unsigned>(gmp::detail::max_cuda_devices))) {
    if (gmp::DeviceAllocator* a = served[device].load(std::memory_order_acquire); GPUMEMPROF_LIKELY(a != nullptr)) {
      return *a;
    }
  }
  return first_use(device);
}

/// Runs `f`; on an exception keeps its message (and prints it when `print`) and returns `fail`.
template <class F, class R>
R guarded(const char* what, bool print, R fail, F&& f) noexcept {
  try {
    last_error[0] = '\0';
    return f();
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": " + e.what());
  } catch (...) {
    set_last_error(std::string(what) + ": unknown error");
  }
  if (print) std::fprintf(stderr, "gpumemprof_torch: %s\n", last_error);
  return fail;
}

/// Copies `text` into `buf` (at most `capacity` bytes with the NUL); returns its full length.
ssize_t copy_out(const std::string& text, char* buf, size_t capacity) {
  if (buf != nullptr && capacity > 0) {
    const std::size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return static_cast<ssize_t>(text.size());
}

/// The JSON text that `write` writes.
template <class F>
std::string json_text(F&& write) {
  std::ostringstream out;
  {
    gmp::JsonWriter json(out);
    write(json);
    json.finish();
  }
  return out.str();
}

}  // namespace

extern "C" {

void* gpumemprof_malloc(ssize_t size, int device, cudaStream_t stream) {
  if (raise_on_oom.load(std::memory_order_relaxed) && size > 0) {
    // Under PyTorch: an error reaches the caller as an exception (torch's bindings turn it into a
    // RuntimeError). A null pointer would become a tensor without memory.
    try {
      last_error[0] = '\0';
      return allocator_of(device).allocate(static_cast<std::size_t>(size), gmp::Stream(stream));
    } catch (const std::exception& e) {
      set_last_error(std::string("gpumemprof_malloc: ") + e.what());
      throw std::runtime_error(e.what());
    }
  }
  return guarded("gpumemprof_malloc", true, static_cast<void*>(nullptr), [&] {
    if (size < 0) throw std::invalid_argument("negative size " + std::to_string(size));
    if (size == 0) return static_cast<void*>(nullptr);  // as PyTorch's own allocator: no block
    return allocator_of(device).allocate(static_cast<std::size_t>(size), gmp::Stream(stream));
  });
}

void gpumemprof_raise_on_error(int on) { raise_on_oom.store(on != 0, std::memory_order_relaxed); }

void gpumemprof_free(void* ptr, ssize_t /*size*/, int device, cudaStream_t /*stream*/) {
  if (ptr == nullptr) return;
  guarded("gpumemprof_free", true, 0, [&] {
    allocator_of(device).deallocate(ptr);
    return 0;
  });
}

int gpumemprof_record_stream(void* ptr, int device, cudaStream_t stream) {
  return guarded("gpumemprof_record_stream", false, -1, [&] {
    allocator_of(device).record_stream(ptr, gmp::Stream(stream));
    return 0;
  });
}

void gpumemprof_record_stream_any_device(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  guarded("record_stream", true, 0, [&] {
    // The current device first (where PyTorch's callers are, nearly always), then the others in
    // use, ascending. On the stack: NCCL records a stream for every collective's tensors.
    std::array<gmp::DeviceAllocator*, gmp::detail::max_cuda_devices> candidates{};
    std::size_t n = 0;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current >= 0 && current < gmp::detail::max_cuda_devices &&
        served[current].load(std::memory_order_acquire) != nullptr) {
      candidates[n++] = &allocator_of(current);
    }
    for_each_device_in_use([&](int d) {
      if (d != current) candidates[n++] = &allocator_of(d);
    });
    (void)gpumemprof_torch::record_stream_in_owner(ptr, gmp::Stream(stream),
                                                   std::span<gmp::DeviceAllocator* const>(candidates.data(), n));
    return 0;
  });
}

ssize_t gpumemprof_memory_stats_json(int device, char* buf, size_t capacity) {
  return guarded("gpumemprof_memory_stats_json", false, static_cast<ssize_t>(-1), [&] {
    const auto stats = allocator_of(device).memory_stats().as_map();
    return copy_out(json_text([&](gmp::JsonWriter& json) {
                      json.begin_dict();
                      for (const auto& [key, value] : stats) json.field(key, value);
                      json.end_dict();
                    }),
                    buf, capacity);
  });
}

int gpumemprof_dump_rank_snapshot(int device, const char* dir, int rank, int world_size) {
  return guarded("gpumemprof_dump_rank_snapshot", false, -1, [&] {
    if (dir == nullptr) throw std::invalid_argument("no folder");
    (void)gmp::dump_rank_snapshot(allocator_of(device), dir, rank, world_size);
    return 0;
  });
}

int gpumemprof_dump_on_oom(int device, const char* dir, int rank, int world_size) {
  return guarded("gpumemprof_dump_on_oom", false, -1, [&] {
    if (dir == nullptr) throw std::invalid_argument("no folder");
    (void)gmp::attach_rank_oom_dump(allocator_of(device), dir, rank, world_size);
    return 0;
  });
}

ssize_t gpumemprof_rank_summary(const char* dir, char* buf, size_t capacity) {
  return guarded("gpumemprof_rank_summary", false, static_cast<ssize_t>(-1), [&] {
    if (dir == nullptr) throw std::invalid_argument("no folder");
    return copy_out(gmp::format_cross_rank(gmp::load_cross_rank({dir})), buf, capacity);
  });
}

int gpumemprof_dump_snapshot(int device, const char* path) {
  return guarded("gpumemprof_dump_snapshot", false, -1, [&] {
    if (path == nullptr) throw std::invalid_argument("no path");
    gmp::dump_snapshot(allocator_of(device), path);
    return 0;
  });
}

int gpumemprof_record_memory_history(int device, int enabled, size_t max_entries) {
  return guarded("gpumemprof_record_memory_history", false, -1, [&] {
    if (enabled < 0 || enabled > 2) throw std::invalid_argument("enabled must be 0 (off), 1 (state) or 2 (all)");
    gmp::HistoryOptions options;
    options.enabled = static_cast<gmp::HistoryEnabled>(enabled);
    if (max_entries != 0) options.max_entries = max_entries;
    gmp::record_memory_history(options, gmp::Device::cuda(device));
    return 0;
  });
}

int gpumemprof_history(const char* enabled, const char* context, const char* stacks, size_t max_entries,
                       int clear_history) {
  return guarded("gpumemprof_history", false, -1, [&] {
    gmp::HistoryOptions options;
    options.enabled = gmp::parse_history_enabled(enabled != nullptr ? enabled : "");
    options.context = gmp::parse_history_context(context != nullptr ? context : "");
    options.stacks = gmp::parse_history_stacks(stacks != nullptr ? stacks : "");
    options.max_entries = max_entries == 0 ? options.max_entries : max_entries;
    options.clear_history = clear_history != 0;
    if (options.stacks == gmp::HistoryStacks::python || options.stacks == gmp::HistoryStacks::all) {
      (void)gpumemprof_torch_install_python_frames();  // outside Python: C++ frames (python_frames.hpp)
    }
    std::lock_guard lock(history_mutex);
    history_wanted = options.enabled != gmp::HistoryEnabled::off;
    wanted_history = options;
    for_each_device_in_use([&](int d) { gmp::record_memory_history(options, gmp::Device::cuda(d)); });
    return 0;
  });
}

int gpumemprof_devices_in_use(int* out, int capacity) {
  int n = 0;
  for_each_device_in_use([&](int d) {
    if (out != nullptr && n < capacity) out[n] = d;
    ++n;
  });
  return n;
}

int gpumemprof_dump_snapshot_devices(const char* path) {
  return guarded("gpumemprof_dump_snapshot_devices", false, -1, [&] {
    if (path == nullptr) throw std::invalid_argument("no path");
    std::vector<gmp::Device> devices;
    for_each_device_in_use([&](int d) { devices.push_back(gmp::Device::cuda(d)); });
    gmp::dump_snapshot_devices(path, devices);
    return 0;
  });
}

int gpumemprof_reset_peak_memory_stats(int device) {
  return guarded("gpumemprof_reset_peak_memory_stats", false, -1, [&] {
    allocator_of(device).reset_peak_memory_stats();
    return 0;
  });
}

int gpumemprof_reset_accumulated_memory_stats(int device) {
  return guarded("gpumemprof_reset_accumulated_memory_stats", false, -1, [&] {
    allocator_of(device).reset_accumulated_memory_stats();
    return 0;
  });
}

int gpumemprof_set_memory_fraction(int device, double fraction) {
  return guarded("gpumemprof_set_memory_fraction", false, -1, [&] {
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
      throw std::invalid_argument("fraction " + std::to_string(fraction) + " is outside 0..1");
    }
    allocator_of(device).set_memory_fraction(fraction);
    return 0;
  });
}

int gpumemprof_empty_cache(int device) {
  return guarded("gpumemprof_empty_cache", false, -1, [&] {
    allocator_of(device).empty_cache();
    return 0;
  });
}

void gpumemprof_empty_cache_all(void) {
  guarded("emptyCache", true, 0, [] {
    for_each_device_in_use([](int d) { allocator_of(d).empty_cache(); });
    return 0;
  });
}

int gpumemprof_track_external_memory(void) {
  return guarded("gpumemprof_track_external_memory", false, 0, [] { return gmp::track_external_memory() ? 1 : 0; });
}

int gpumemprof_counters(int device, int64_t out[6]) {
  return guarded("gpumemprof_counters", false, -1, [&] {
    const gmp::AllocatorGauges g = allocator_of(device).gauges();
    out[0] = g.allocated_bytes;
    out[1] = g.reserved_bytes;
    out[2] = static_cast<int64_t>(g.total_allocations);
    out[3] = static_cast<int64_t>(g.total_frees);
    out[4] = static_cast<int64_t>(g.total_allocated_bytes);
    out[5] = static_cast<int64_t>(g.total_freed_bytes);
    return 0;
  });
}

uint64_t gpumemprof_open_peak_window(int device) {
  return guarded("gpumemprof_open_peak_window", false, uint64_t{0},
                 [&] { return allocator_of(device).open_peak_window(); });
}

int64_t gpumemprof_close_peak_window(int device, uint64_t id) {
  return guarded("gpumemprof_close_peak_window", false, int64_t{-1},
                 [&] { return allocator_of(device).close_peak_window(id); });
}

int gpumemprof_set_category(void* ptr, int device, const char* category, int only_untagged) {
  return guarded("gpumemprof_set_category", false, -1, [&] {
    if (category == nullptr) throw std::invalid_argument("no category name");
    gmp::detail::DefaultCategoryLedgers::instance().enable();
    const std::uint32_t id = gmp::detail::MetadataStrings::instance().intern(category);
    return allocator_of(device).set_category(ptr, id, only_untagged != 0) ? 1 : 0;
  });
}

int gpumemprof_push_category(const char* category) {
  return guarded("gpumemprof_push_category", false, -1, [&] {
    if (category == nullptr) throw std::invalid_argument("no category name");
    if (category_depth == kMaxCategoryDepth) {
      throw std::length_error("more than " + std::to_string(kMaxCategoryDepth) + " nested categories on this thread");
    }
    gmp::detail::DefaultCategoryLedgers::instance().enable();
    const std::uint32_t id = gmp::detail::MetadataStrings::instance().intern(category);
    saved_categories[category_depth++] = gmp::detail::thread_memory_category;
    gmp::detail::thread_memory_category = id;
    return 0;
  });
}

int gpumemprof_pop_category(void) {
  return guarded("gpumemprof_pop_category", false, -1, [&] {
    if (category_depth == 0) throw std::logic_error("no category was pushed on this thread");
    gmp::detail::thread_memory_category = saved_categories[--category_depth];
    return 0;
  });
}

ssize_t gpumemprof_category_stats_json(int device, char* buf, size_t capacity) {
  return guarded("gpumemprof_category_stats_json", false, static_cast<ssize_t>(-1), [&] {
    const gmp::CategoryStats stats = gmp::category_stats(gmp::Device::cuda(device));
    return copy_out(json_text([&](gmp::JsonWriter& json) {
                      json.begin_dict();
                      for (const auto& [name, stat] : stats) {
                        json.key(name);
                        json.begin_dict();
                        json.field("current", stat.current);
                        json.field("peak", stat.peak);
                        json.field("allocated_current", stat.allocated_current);
                        json.field("allocated_peak", stat.allocated_peak);
                        json.end_dict();
                      }
                      json.end_dict();
                    }),
                    buf, capacity);
  });
}

int gpumemprof_reset_category_peaks(int device) {
  return guarded("gpumemprof_reset_category_peaks", false, -1, [&] {
    gmp::reset_category_peaks(gmp::Device::cuda(device));
    return 0;
  });
}

int gpumemprof_python_waiting_thread(int on) { return gpumemprof_torch_set_waiting_thread(on != 0) ? 1 : 0; }

ssize_t gpumemprof_python_stack_json(char* buf, size_t capacity) {
  return guarded("gpumemprof_python_stack_json", false, static_cast<ssize_t>(-1), [&] {
    const std::vector<gmp::Frame> frames = gpumemprof_torch_python_stack();
    return copy_out(json_text([&](gmp::JsonWriter& json) {
                      json.begin_list();
                      for (const gmp::Frame& f : frames) {
                        json.begin_dict();
                        json.field("filename", f.filename);
                        json.field("line", f.line);
                        json.field("name", f.name);
                        json.end_dict();
                      }
                      json.end_list();
                    }),
                    buf, capacity);
  });
}

const char* gpumemprof_last_error(void) { return last_error; }

const char* gpumemprof_alloc_conf(void) {
  static const std::string text = alloc_conf().first.empty() ? "" : alloc_conf().first + "=" + alloc_conf().second;
  return text.c_str();
}

}  // extern "C"

// The CUDA graph hooks (C++ types, C names: gpumemprof_torch.h). A failure is printed and kept,
// never thrown: libtorch calls them around a capture, and release_pool from a graph's destructor.
void gpumemprof_begin_allocate_to_pool(int device, std::pair<unsigned long long, unsigned long long> pool,
                                       std::function<bool(cudaStream_t)> filter) {
  guarded("beginAllocateToPool", true, 0, [&] {
    gpumemprof_torch::begin_allocate_to_pool(allocator_of(device), pool, std::move(filter));
    return 0;
  });
}

void gpumemprof_end_allocate_to_pool(int device, std::pair<unsigned long long, unsigned long long> pool) {
  guarded("endAllocateToPool", true, 0, [&] {
    gpumemprof_torch::end_allocate_to_pool(allocator_of(device), pool);
    return 0;
  });
}

void gpumemprof_release_pool(int device, std::pair<unsigned long long, unsigned long long> pool) {
  guarded("releasePool", true, 0, [&] {
    gpumemprof_torch::release_pool(allocator_of(device), pool);
    return 0;
  });
}
