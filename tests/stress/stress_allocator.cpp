// Model-based stress of the caching allocator on the simulated device. Not a benchmark.
//
// Long seeded random sequences of allocate (both pools, oversize, odd sizes), free,
// record_stream with events completed out of order across streams, empty_cache, stat resets and
// memory-fraction changes, under each config variant and at a small capacity where OOM is
// common. After every step: validate() (the allocator's own invariants) and a reference model --
// a map of live blocks -- that recomputes allocation counts, requested bytes (current, peak,
// totals since reset) and bounds allocated/active bytes; every pointer handed out must not
// overlap a live block or a freed one whose streams have not finished. Every 256 steps the
// allocator's segment view must list exactly the model's blocks. A threaded phase runs
// several threads on one allocator against one shared interval map.
//
// usage: stress_allocator [--ops N] [--seeds 1,2,3] [--threads T] [--quiet]
//   N operations per seed, spread over the config variants (default 1000000 / number of seeds).
//   Exit 0 when every check held; else the first failure (seed, variant, step) and exit 1.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../units.hpp"
#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/allocator/size_policy.hpp"
#include "gpumemprof/device/simulated.hpp"

namespace gmp = gpumemprof;

namespace {

/// One configuration the sequence runs under.
struct Variant {
  const char* name;
  const char* conf;
  std::size_t capacity;
  double fraction;  // < 0: none
};
const std::vector<Variant>& variants() {
  static const std::vector<Variant> list{
      {"default", "", 80 * GiB, -1},
      {"max_split_size", "max_split_size_mb:40", 80 * GiB, -1},
      {"roundup_power2_divisions", "roundup_power2_divisions:[64:8,256:4,>:2]", 80 * GiB, -1},
      {"gc_threshold+fraction", "garbage_collection_threshold:0.6", 8 * GiB, 0.5},
      {"small_capacity_oom", "max_split_size_mb:20,roundup_power2_divisions:4", 160 * MiB, -1},
      {"expandable", "expandable_segments:True", 80 * GiB, -1},
      {"expandable_small_capacity_oom", "expandable_segments:True", 256 * MiB, -1},
  };
  return list;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::logic_error(where + ": " + what);
}

struct LiveBlock {
  std::size_t requested;
  std::size_t rounded;  // the least the block can be (round_size)
  gmp::Stream stream;
  std::vector<std::uintptr_t> used_on;  // record_stream streams
};
struct PendingBlock {
  std::uintptr_t end;
  std::size_t requested;
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> waits;  // (stream, completions at free)
};

/// A single-threaded run of one seed under one variant.
class ModelRun {
 public:
  ModelRun(const Variant& v, std::uint64_t seed)
      : variant_(v),
        rng_(seed),
        alloc_(gmp::SimulatedBackend(gmp::SimulatedOptions{v.capacity, 0, 2 * MiB, false}),
               gmp::AllocatorConfig(v.conf)),
        where_(std::string("seed ") + std::to_string(seed) + ", variant " + v.name) {
    if (v.fraction >= 0) alloc_.set_memory_fraction(v.fraction);
  }

  /// Runs `ops` steps; returns the number of OOMs met.
  std::size_t run(std::size_t ops) {
    for (step_ = 0; step_ < ops; ++step_) {
      one_step();
      check();
    }
    // Tear down: everything freed, every event completed, cache emptied: nothing held.
    while (!live_.empty()) free_at(live_.begin()->first);
    alloc_.backend().complete_all_events();
    alloc_.empty_cache();
    all_streams_synchronized();
    check();
    const auto st = alloc_.memory_stats();
    if (st.reserved_bytes.all().current != 0) fail(at(), "reserved bytes left after empty_cache with nothing live");
    return ooms_;
  }

 private:
  std::string at() const { return where_ + ", step " + std::to_string(step_); }

  std::size_t random_size() {
    switch (rng_() % 8) {
      case 0: return 1 + rng_() % 512;  // tiny, odd
      case 1:
      case 2: return 1 + rng_() % (1 * MiB);                   // small pool
      case 3: return (1 * MiB) + 1 + rng_() % (9 * MiB);       // large, below kLargeBuffer
      case 4: return (10 * MiB) + rng_() % (30 * MiB);         // large, its own segment
      case 5: return (40 * MiB) + rng_() % (60 * MiB);         // oversize with max_split_size:40
      case 6: return std::size_t{1} << (rng_() % 27);          // powers of two
      default: return 512 * (1 + rng_() % 4096) - rng_() % 3;  // near multiples of 512
    }
  }

  void one_step() {
    const unsigned r = static_cast<unsigned>(rng_() % 1000);
    // Allocation leads while few blocks are live and trails beyond 128: the live set hovers
    // around a hundred blocks instead of growing without bound.
    if (r < (live_.size() < 128 ? 520u : 330u)) {
      allocate();
    } else if (r < 850) {
      if (live_.empty()) return;
      auto it = live_.begin();
      std::advance(it, static_cast<long>(rng_() % live_.size()));
      if (rng_() % 4 == 0) {  // used on another stream first
        const std::uintptr_t s = 1 + rng_() % 4;
        alloc_.record_stream(reinterpret_cast<void*>(it->first), gmp::Stream(s));
        if (s != it->second.stream.id) it->second.used_on.push_back(s);
      }
      free_at(it->first);
    } else if (r < 960) {
      // One stream's work completes: streams finish out of order relative to each other.
      const std::uintptr_t s = 1 + rng_() % 4;
      alloc_.backend().complete_events(gmp::Stream(s));
      ++completions_[s];
    } else if (r < 975) {
      alloc_.empty_cache();  // waits for every event: all pending blocks become free
      syncs_ = alloc_.memory_stats().num_sync_all_streams;
      all_streams_synchronized();
    } else if (r < 990) {
      alloc_.reset_peak_memory_stats();
      peak_requested_ = requested_ + pending_requested_;
    } else {
      alloc_.reset_accumulated_memory_stats();
      syncs_ = alloc_.memory_stats().num_sync_all_streams;  // an accumulated stat: 0 now
      allocs_since_reset_ = frees_since_reset_ = 0;
      requested_in_ = requested_out_ = 0;
    }
  }

  void allocate() {
    const std::size_t bytes = random_size();
    const gmp::Stream stream(rng_() % 3);  // the default stream and two more
    void* p = nullptr;
    try {
      p = alloc_.allocate(bytes, stream);
    } catch (const gmp::OutOfMemoryError&) {
      ++ooms_;
      processed_events();
      return;
    }
    processed_events();
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::size_t rounded = gmp::round_size(bytes, alloc_.config());
    if (a % 512 != 0) fail(at(), "pointer not 512-byte aligned");
    if (live_.count(a) != 0) fail(at(), "pointer handed out twice");
    // No overlap with a live block, nor with a freed block whose streams are still running.
    check_no_overlap(a, a + rounded);
    live_.emplace(a, LiveBlock{bytes, rounded, stream, {}});
    ranges_.emplace(a, a + rounded);
    requested_ += bytes;
    requested_in_ += bytes;
    peak_requested_ = std::max(peak_requested_, requested_ + pending_requested_);
    ++allocs_since_reset_;
  }

  void check_no_overlap(std::uintptr_t begin, std::uintptr_t end) {
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.end() && it->first < end) fail(at(), "new block overlaps a live block");
    if (it != ranges_.begin() && std::prev(it)->second > begin) fail(at(), "new block overlaps a live block");
    for (const auto& [pa, pb] : pending_) {
      if (pa < end && begin < pb.end) fail(at(), "block reused before the stream it was recorded on finished");
    }
  }

  /// allocate() first frees the blocks whose streams have finished (PyTorch's process_events);
  /// when it had to release the cache it waited for every stream (num_sync_all_streams).
  void processed_events() {
    const std::int64_t syncs = alloc_.memory_stats().num_sync_all_streams;
    if (syncs != syncs_) {
      syncs_ = syncs;
      all_streams_synchronized();
      return;
    }
    for (auto p = pending_.begin(); p != pending_.end();) {
      if (done(p->second)) {
        pending_requested_ -= static_cast<std::int64_t>(p->second.requested);
        requested_out_ += static_cast<std::int64_t>(p->second.requested);
        p = pending_.erase(p);
      } else {
        ++p;
      }
    }
  }
  void all_streams_synchronized() {
    for (auto& [s, n] : completions_) ++n;
    pending_.clear();
    requested_out_ += pending_requested_;
    pending_requested_ = 0;
  }

  bool done(const PendingBlock& b) {
    for (const auto& [s, at_free] : b.waits) {
      if (completions_[s] <= at_free) return false;
    }
    return true;
  }

  void free_at(std::uintptr_t a) {
    auto it = live_.find(a);
    const LiveBlock b = it->second;
    alloc_.deallocate(reinterpret_cast<void*>(a));
    live_.erase(it);
    ranges_.erase(a);
    requested_ -= b.requested;
    if (b.used_on.empty()) requested_out_ += static_cast<std::int64_t>(b.requested);  // else once processed
    ++frees_since_reset_;
    if (!b.used_on.empty()) {
      pending_requested_ += static_cast<std::int64_t>(b.requested);
      PendingBlock pb{a + b.rounded, b.requested, {}};
      for (auto s : b.used_on) pb.waits.emplace_back(s, completions_[s]);
      pending_.emplace(a, std::move(pb));
    }
  }

  void check() {
    alloc_.validate();
    const auto st = alloc_.memory_stats();
    auto expect = [&](std::int64_t got, std::int64_t want, const char* what) {
      if (got != want) fail(at(), std::string(what) + " is " + std::to_string(got) + ", model " + std::to_string(want));
    };
    std::int64_t small = 0;
    std::int64_t min_allocated = 0;
    for (const auto& [a, b] : live_) {
      small += gmp::is_small_size(b.rounded) ? 1 : 0;
      min_allocated += static_cast<std::int64_t>(b.rounded);
    }
    expect(st.allocation.all().current, static_cast<std::int64_t>(live_.size()), "allocation.all.current");
    expect(st.allocation[gmp::StatPool::small_pool].current, small, "allocation.small_pool.current");
    expect(st.allocation.all().allocated, allocs_since_reset_, "allocation.all.allocated");
    expect(st.allocation.all().freed, frees_since_reset_, "allocation.all.freed");
    // A freed block waiting for other streams still counts as active and requested (PyTorch).
    expect(st.requested_bytes.all().current, requested_ + pending_requested_, "requested_bytes.all.current");
    expect(st.requested_bytes.all().peak, peak_requested_, "requested_bytes.all.peak");
    expect(st.requested_bytes.all().allocated, requested_in_, "requested_bytes.all.allocated");
    expect(st.requested_bytes.all().freed, requested_out_, "requested_bytes.all.freed");
    const std::int64_t allocated = st.allocated_bytes.all().current;
    const std::int64_t active = st.active_bytes.all().current;
    const std::int64_t reserved = st.reserved_bytes.all().current;
    if (allocated < min_allocated) fail(at(), "allocated_bytes below the sum of rounded live sizes");
    if (active < allocated || reserved < active) fail(at(), "not allocated <= active <= reserved");
    if (pending_.empty() && active != allocated) fail(at(), "active bytes with no block awaiting a stream");
    if (variant_.fraction >= 0 &&
        static_cast<double>(reserved) > variant_.fraction * static_cast<double>(variant_.capacity) + 1) {
      fail(at(), "reserved bytes above the memory fraction");
    }
    if (step_ % 256 == 0) check_segments(allocated);
  }

  /// The allocator's own view lists exactly the model's live blocks.
  void check_segments(std::int64_t allocated) {
    std::size_t seen = 0;
    std::int64_t sum = 0;
    for (const auto& seg : alloc_.segments()) {
      for (const auto& b : seg.blocks) {
        if (b.state != gmp::BlockState::active_allocated) continue;
        auto it = live_.find(b.address);
        if (it == live_.end()) fail(at(), "an allocated block the model does not know");
        if (b.requested_size != it->second.requested) fail(at(), "a block's requested size differs from the model");
        if (b.size < it->second.rounded) fail(at(), "a block smaller than its rounded request");
        ++seen;
        sum += static_cast<std::int64_t>(b.size);
      }
    }
    if (seen != live_.size()) fail(at(), "the segments miss live blocks");
    if (sum != allocated) fail(at(), "allocated_bytes differs from the sum of allocated blocks");
  }

  const Variant& variant_;
  std::mt19937_64 rng_;
  gmp::CachingAllocator<gmp::SimulatedBackend> alloc_;
  std::string where_;
  std::size_t step_ = 0;
  std::map<std::uintptr_t, LiveBlock> live_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // begin -> end of live blocks (rounded)
  std::map<std::uintptr_t, PendingBlock> pending_;
  std::unordered_map<std::uintptr_t, std::uint64_t> completions_;
  std::int64_t pending_requested_ = 0;
  std::int64_t syncs_ = 0;
  std::int64_t requested_ = 0, peak_requested_ = 0, requested_in_ = 0, requested_out_ = 0;
  std::int64_t allocs_since_reset_ = 0, frees_since_reset_ = 0;
  std::size_t ooms_ = 0;
};

/// Several threads on one allocator, each on its own streams, all against one interval map:
/// a pointer handed to one thread never overlaps another thread's live block. At the end the
/// stats equal the sum of what the threads still hold (nothing).
void threaded_run(std::uint64_t seed, int threads, std::size_t ops_per_thread, const char* conf) {
  gmp::CachingAllocator<gmp::SimulatedBackend> alloc(
      gmp::SimulatedBackend(gmp::SimulatedOptions{4 * GiB, 0, 2 * MiB, true}), gmp::AllocatorConfig(conf));
  const std::string where = "seed " + std::to_string(seed) + ", threaded, config '" + conf + "'";
  std::mutex ranges_mutex;
  std::map<std::uintptr_t, std::uintptr_t> ranges;
  std::atomic<bool> failed{false};
  std::string failure;
  std::atomic<std::int64_t> requested{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000003u + static_cast<unsigned>(t));
      std::vector<std::pair<void*, std::size_t>> mine;
      try {
        for (std::size_t i = 0; i < ops_per_thread && !failed; ++i) {
          const unsigned r = static_cast<unsigned>(rng() % 100);
          if (mine.empty() || r < (mine.size() < 48 ? 55u : 40u)) {  // about 48 blocks per thread
            const std::size_t bytes = 1 + rng() % (rng() % 4 == 0 ? 24 * MiB : 256 * 1024);
            void* p = nullptr;
            try {
              p = alloc.allocate(bytes, gmp::Stream(static_cast<std::uintptr_t>(t % 3)));
            } catch (const gmp::OutOfMemoryError&) {
              continue;  // other threads hold the memory now: a valid outcome, nothing changed
            }
            const auto a = reinterpret_cast<std::uintptr_t>(p);
            const std::uintptr_t end = a + gmp::round_size(bytes, alloc.config());
            {
              std::lock_guard lock(ranges_mutex);
              auto it = ranges.upper_bound(a);
              if ((it != ranges.end() && it->first < end) || (it != ranges.begin() && std::prev(it)->second > a)) {
                throw std::logic_error("two threads hold overlapping blocks");
              }
              ranges.emplace(a, end);
            }
            requested += static_cast<std::int64_t>(bytes);
            mine.emplace_back(p, bytes);
          } else if (r < 97) {
            const std::size_t k = rng() % mine.size();
            if (rng() % 5 == 0) alloc.record_stream(mine[k].first, gmp::Stream(3 + rng() % 2));
            {
              std::lock_guard lock(ranges_mutex);
              ranges.erase(reinterpret_cast<std::uintptr_t>(mine[k].first));
            }
            alloc.deallocate(mine[k].first);
            requested -= static_cast<std::int64_t>(mine[k].second);
            mine[k] = mine.back();
            mine.pop_back();
          } else if (r < 98) {
            alloc.validate();
          } else if (r < 99) {
            alloc.empty_cache();
          } else {
            alloc.reset_peak_memory_stats();
          }
        }
        for (auto& [p, n] : mine) {
          {
            std::lock_guard lock(ranges_mutex);
            ranges.erase(reinterpret_cast<std::uintptr_t>(p));
          }
          alloc.deallocate(p);
          requested -= static_cast<std::int64_t>(n);
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(ranges_mutex);
        if (!failed.exchange(true)) failure = "thread " + std::to_string(t) + ": " + e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (failed) fail(where, failure);
  alloc.validate();
  // Blocks freed after record_stream count as requested until the allocator processes their
  // events (next allocate or empty_cache).
  alloc.empty_cache();
  alloc.validate();
  const auto st = alloc.memory_stats();
  if (st.allocation.all().current != 0 || st.requested_bytes.all().current != 0 || requested != 0 ||
      st.active_bytes.all().current != 0) {
    fail(where, "allocations left after every thread freed its blocks");
  }
}

std::vector<std::uint64_t> parse_seeds(const std::string& s) {
  std::vector<std::uint64_t> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = s.find(',', at);
    const std::string part = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const auto dash = part.find('-');
    if (dash != std::string::npos) {  // a range "1-16"
      for (auto k = std::stoull(part.substr(0, dash)); k <= std::stoull(part.substr(dash + 1)); ++k) out.push_back(k);
    } else {
      out.push_back(std::stoull(part));
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Sanitizer builds run the same checks on fewer operations (TSan is ~10x slower).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kSanitizerDivisor = 20;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr std::size_t kSanitizerDivisor = 20;
#else
constexpr std::size_t kSanitizerDivisor = 1;
#endif
#else
constexpr std::size_t kSanitizerDivisor = 1;
#endif

}  // namespace

int main(int argc, char** argv) {
  std::size_t ops = 1000000;
  std::vector<std::uint64_t> seeds{1, 2, 3};
  int threads = 4;
  bool quiet = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--ops") {
        ops = std::stoull(value());
      } else if (a == "--seeds") {
        seeds = parse_seeds(value());
      } else if (a == "--threads") {
        threads = std::stoi(value());
      } else if (a == "--quiet") {
        quiet = true;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stress_allocator: %s\nusage: stress_allocator [--ops N] [--seeds 1,2,5-8] [--threads T]\n",
                 e.what());
    return 2;
  }
  ops /= kSanitizerDivisor;
  const auto start = std::chrono::steady_clock::now();
  std::size_t total = 0, ooms = 0;
  try {
    for (const auto seed : seeds) {
      // 90% of the operations single-threaded over the variants, 10% in the threaded phase.
      const std::size_t per_variant = ops * 9 / 10 / variants().size();
      for (const auto& v : variants()) {
        ooms += ModelRun(v, seed).run(per_variant);
        total += per_variant;
      }
      if (threads > 0) {  // the lock held across the device's malloc and not; expandable segments
        const std::size_t per_thread = ops / 30 / static_cast<std::size_t>(threads);
        for (const char* conf : {"", "release_lock_on_cudamalloc:True", "expandable_segments:True"}) {
          threaded_run(seed, threads, per_thread, conf);
          total += per_thread * static_cast<std::size_t>(threads);
        }
      }
      if (!quiet) std::printf("seed %llu: ok\n", static_cast<unsigned long long>(seed));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stress_allocator: FAILED: %s\n", e.what());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "stress_allocator: %zu operations (%zu seeds x %zu variants + %d threads), %zu OOMs, all checks held, %.1f s\n",
      total, seeds.size(), variants().size(), threads, ooms, s);
  return 0;
}
