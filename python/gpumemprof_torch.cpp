// libgpumemprof_torch.so: gpumemprof's caching allocator behind PyTorch's pluggable-allocator C
// ABI (see gpumemprof_torch.h). Exceptions stop here: PyTorch calls these through plain C.
#include "gpumemprof_torch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

#include "gpumemprof/allocator/default_allocator.hpp"
#include "gpumemprof/export/formats/dump_snapshot.hpp"
#include "gpumemprof/export/formats/json_writer.hpp"
#include "gpumemprof/export/formats/rank_dump.hpp"
#include "gpumemprof/export/reports/rank_summary.hpp"
#include "gpumemprof/history/history_recorder.hpp"

namespace gmp = gpumemprof;

namespace {

// A plain array, never destroyed: PyTorch frees tensors from its own static destructors at exit,
// after this thread's thread_local objects are gone, and every call here touches this message.
thread_local char last_error[1024];

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

gmp::DeviceAllocator& allocator_of(int device) {
  // Before the first allocator exists: the default allocators read $GPUMEMPROF_ALLOC_CONF, so
  // PyTorch's variable is handed on through it, checked first so that an error names it.
  static const bool configured = [] {
    const auto& [name, value] = alloc_conf();
    if (!name.empty() && name != "GPUMEMPROF_ALLOC_CONF") {
      try {
        (void)gmp::AllocatorConfig::parse(value);
      } catch (const gmp::ConfigError& e) {
        throw gmp::ConfigError("$" + name + "='" + value + "' (which gpumemprof follows while $GPUMEMPROF_ALLOC_CONF " +
                               "is unset): " + e.what());
      }
      ::setenv("GPUMEMPROF_ALLOC_CONF", value.c_str(), 0);
    }
    return true;
  }();
  (void)configured;
  return gmp::default_allocator(gmp::Device::cuda(device));
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

}  // namespace

extern "C" {

void* gpumemprof_malloc(ssize_t size, int device, cudaStream_t stream) {
  return guarded("gpumemprof_malloc", true, static_cast<void*>(nullptr), [&] {
    if (size < 0) throw std::invalid_argument("negative size " + std::to_string(size));
    if (size == 0) return static_cast<void*>(nullptr);  // as PyTorch's own allocator: no block
    return allocator_of(device).allocate(static_cast<std::size_t>(size), gmp::Stream(stream));
  });
}

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

ssize_t gpumemprof_memory_stats_json(int device, char* buf, size_t capacity) {
  return guarded("gpumemprof_memory_stats_json", false, static_cast<ssize_t>(-1), [&] {
    std::ostringstream out;
    {
      gmp::JsonWriter json(out);
      json.begin_dict();
      for (const auto& [key, value] : allocator_of(device).memory_stats().as_map()) {
        json.key(key);
        json.value(value);
      }
      json.end_dict();
      json.finish();
    }
    return copy_out(out.str(), buf, capacity);
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

int gpumemprof_empty_cache(int device) {
  return guarded("gpumemprof_empty_cache", false, -1, [&] {
    allocator_of(device).empty_cache();
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

const char* gpumemprof_last_error(void) { return last_error; }

const char* gpumemprof_alloc_conf(void) {
  static const std::string text = alloc_conf().first.empty() ? "" : alloc_conf().first + "=" + alloc_conf().second;
  return text.c_str();
}

}  // extern "C"
