// Replaying a trace through an allocator: the request stream PyTorch's allocator saw, timed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include "gpumemprof/allocator/memory_stats.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"
#include "trace.hpp"

namespace gpumemprof::tools {

struct ReplayResult {
  std::size_t allocs = 0;
  std::size_t frees = 0;
  std::uint64_t peak_requested_bytes = 0;  // from the trace: the least any allocator must hold
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t num_device_alloc = 0;
  double seconds = 0;      // the replay loop alone
  double ns_per_pair = 0;  // seconds / allocs
  MemoryStats stats;       // at the end
};

/// The streams of a trace on the replaying device. A recorded stream value is a handle of the
/// process that recorded it -- on a GPU, using it would touch freed or foreign memory -- so every
/// nonzero one is rewritten to a stream created here (0 stays the default stream), in `t` itself.
/// Create it before the allocator that replays `t` and let it go after: the allocator's cached
/// memory refers to the streams until it is destroyed.
class ReplayStreams {
 public:
  ReplayStreams(const Device& device, Trace& t) : backend_(AnyBackend::for_device(device)) {
    std::vector<std::pair<std::uint64_t, Stream>> made;  // recorded value -> stream (a trace has few)
    for (TraceOp& op : t.ops) {
      if (!op.is_alloc || op.stream == 0) continue;
      auto it = std::find_if(made.begin(), made.end(), [&](const auto& m) { return m.first == op.stream; });
      if (it == made.end()) {
        made.emplace_back(op.stream, backend_.create_stream());
        streams_.push_back(made.back().second);
        it = made.end() - 1;
      }
      op.stream = it->second.id;
    }
  }
  ~ReplayStreams() {
    for (Stream s : streams_) {
      try {
        backend_.destroy_stream(s);
      } catch (...) {  // a failing device at exit: nothing left to protect
      }
    }
  }
  ReplayStreams(const ReplayStreams&) = delete;
  ReplayStreams& operator=(const ReplayStreams&) = delete;
  [[nodiscard]] std::size_t count() const noexcept { return streams_.size(); }

 private:
  AnyBackend backend_;
  std::vector<Stream> streams_;
};

/// Runs every op of `t` through `alloc` (anything with allocate(bytes, Stream),
/// deallocate(ptr), memory_stats()). Blocks live at the end stay allocated; `live` receives
/// them so the caller can free them.
template <class Allocator>
ReplayResult replay(const Trace& t, Allocator& alloc, std::vector<void*>* live = nullptr) {
  std::vector<void*> ptrs(t.id_count, nullptr);
  const auto start = std::chrono::steady_clock::now();
  std::size_t i = 0;
  try {
    for (; i < t.ops.size(); ++i) {
      const TraceOp& op = t.ops[i];
      if (op.is_alloc) {
        ptrs[op.id] = alloc.allocate(op.bytes, Stream(static_cast<std::uintptr_t>(op.stream)));
      } else {
        alloc.deallocate(ptrs[op.id]);
        ptrs[op.id] = nullptr;
      }
    }
  } catch (const OutOfMemoryError& e) {
    // Name the request's line in the trace.
    const TraceOp& op = t.ops[i];
    throw OutOfMemoryError(t.path + ":" + (op.line != 0 ? std::to_string(op.line) : "?") + ": the allocation of " +
                               std::to_string(op.bytes) + " bytes there failed: " + e.what(),
                           e.requested_bytes());
  }
  const auto stop = std::chrono::steady_clock::now();
  ReplayResult r;
  r.allocs = t.allocs;
  r.frees = t.frees;
  r.peak_requested_bytes = t.peak_requested_bytes;
  r.seconds = std::chrono::duration<double>(stop - start).count();
  r.ns_per_pair = t.allocs != 0 ? r.seconds * 1e9 / static_cast<double>(t.allocs) : 0.0;
  r.stats = alloc.memory_stats();
  r.peak_allocated_bytes = r.stats.allocated_bytes.all().peak;
  r.peak_reserved_bytes = r.stats.reserved_bytes.all().peak;
  r.num_device_alloc = r.stats.num_device_alloc;
  if (live != nullptr) {
    live->clear();
    for (void* p : ptrs) {
      if (p != nullptr) live->push_back(p);
    }
  }
  return r;
}

}  // namespace gpumemprof::tools
