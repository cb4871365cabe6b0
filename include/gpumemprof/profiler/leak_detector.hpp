// Layer 4: LeakDetector -- finds memory that a repeatedly called function or scope leaves
// behind, two ways:
//
// 1. Growth. The allocated bytes after each call of a name form a series. Over the newest
//    `window` calls (after `warmup_calls`), a least-squares line is fitted; growth is reported
//    when (a) the slope is positive and significant (slope / standard error >= min_t_statistic),
//    (b) the fitted growth over the window exceeds tolerance_bytes, and (c) the means of
//    `segments` consecutive groups of the window strictly increase. (a) rejects a loop whose
//    memory oscillates, (c) a one-off step (a cache filled once) that a line would also fit.
// 2. Survivors (allocator level, through track()). Blocks allocated during a call and still
//    alive at the end of that call are followed across later calls of the same name; one alive
//    at both ends of min_survived_calls later calls is a survivor. Survivors are grouped by
//    allocation site -- the allocating stack when a HistoryRecorder records stacks, else the
//    requested size -- and a site is suspected when its survivors come from min_leaking_calls
//    distinct calls: a steady leak adds survivors every call, while lazy initialisation (one
//    call) and k-buffering (each block outlives fewer than min_survived_calls later calls) do not.
//    Blocks are identified by address and size: a block freed and another allocated at the
//    same address and size between two calls is taken for the same block.
// A call seen twice -- track() around a profiled call whose result is also observe()d -- is one
// point: points of a name whose time intervals overlap are the same call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/caching_allocator.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/any_backend.hpp"
#include "gpumemprof/history/snapshot.hpp"
#include "gpumemprof/profiler/memory_source.hpp"
#include "gpumemprof/profiler/profile_result.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

struct LeakDetectorOptions {
  /// Calls of a name (after warm-up) needed before its growth is judged.
  std::size_t min_calls = 8;
  /// The newest calls the growth fit uses.
  std::size_t window = 64;
  /// First calls of each name left out of the fit (lazy initialisation, cache warm-up).
  std::size_t warmup_calls = 1;
  /// Significance the slope needs: slope / standard error of the slope.
  double min_t_statistic = 4.0;
  /// Fitted growth over the window (bytes) at or below which growth is noise.
  std::int64_t tolerance_bytes = 0;
  /// Consecutive groups of the window whose means must strictly increase (>= 2).
  std::size_t segments = 4;
  /// Later calls a block must stay alive through to count as a survivor.
  std::size_t min_survived_calls = 4;
  /// Distinct calls a site's survivors must come from for the site to be suspected.
  std::size_t min_leaking_calls = 3;
  /// Blocks followed per name at most (the oldest are kept).
  std::size_t max_followed_blocks = 100'000;
};

/// The growth verdict for one name.
struct MemoryGrowth {
  std::string name;
  std::uint64_t calls = 0;         ///< calls observed
  std::uint64_t calls_fitted = 0;  ///< calls in the fit
  double slope = 0.0;              ///< bytes per call
  double t_statistic = 0.0;        ///< slope / its standard error (infinity for an exact line)
  std::int64_t growth = 0;         ///< what the fitted calls added: slope x calls_fitted, bytes
  bool leak_suspected = false;
  std::string reason;  ///< the verdict in words
};

/// Blocks from one allocation site that outlived the calls that made them.
struct SurvivingAllocations {
  std::string name;                ///< the function or scope
  std::string site;                ///< the allocation site in words
  std::uint64_t context = 0;       ///< history context of the first block (0 when history records none)
  std::size_t requested_size = 0;  ///< bytes, when grouped by request size (no stack recorded)
  std::uint64_t blocks = 0;
  std::int64_t bytes = 0;        ///< block bytes
  std::uint64_t calls = 0;       ///< distinct calls the blocks came from
  std::uint64_t first_call = 0;  ///< index (0-based) of the earliest such call
  std::uint64_t last_call = 0;
  std::vector<std::uintptr_t> addresses;  ///< up to 8, oldest first
  /// The allocation stack when history records stacks (see MemorySource::frames_of).
  Frames frames;
  bool leak_suspected = false;  ///< calls >= min_leaking_calls (else: retained, e.g. lazily initialised)
};

struct LeakReport {
  std::vector<MemoryGrowth> growth;
  std::vector<SurvivingAllocations> survivors;

  [[nodiscard]] bool leak_suspected() const noexcept;

  /// The report in words, one line per name and per survivor site.
  [[nodiscard]] std::string format() const;
};

std::ostream& operator<<(std::ostream& os, const LeakReport& r);

namespace detail {

/// An allocated block at one instant.
struct LiveBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  std::uint64_t context = 0;
  friend bool operator<(const LiveBlock& a, const LiveBlock& b) noexcept {
    return a.address != b.address ? a.address < b.address : a.size < b.size;
  }
  [[nodiscard]] bool same_block(const LiveBlock& o) const noexcept { return address == o.address && size == o.size; }
};

}  // namespace detail

class LeakDetector;

/// One tracked call (from LeakDetector::track); ends when destroyed or end()ed.
class LeakCall {
 public:
  LeakCall(const LeakCall&) = delete;
  LeakCall& operator=(const LeakCall&) = delete;
  ~LeakCall() {
    try {
      end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }
  /// Ends the call now (idempotent).
  void end();

 private:
  friend class LeakDetector;
  LeakCall(LeakDetector& detector, std::string_view name);

  LeakDetector* detector_;
  std::string name_;
  double began_;  // seconds since the Unix epoch
  std::vector<detail::LiveBlock> at_entry_;
};

class LeakDetector {
 public:
  /// A detector reading `source` for track(); with nullptr only observe()/add_point() work.
  explicit LeakDetector(std::shared_ptr<MemorySource> source = nullptr, LeakDetectorOptions options = {})
      : source_(std::move(source)), options_(options) {}
  /// A detector over `allocator`, which must outlive it.
  template <DeviceBackend B>
  explicit LeakDetector(CachingAllocator<B>& allocator, LeakDetectorOptions options = {})
      : LeakDetector(make_memory_source(allocator), options) {}
  ~LeakDetector();
  LeakDetector(const LeakDetector&) = delete;
  LeakDetector& operator=(const LeakDetector&) = delete;

  /// Starts a tracked call of `name`: the live blocks now are remembered; at its end the blocks
  /// allocated during it that are still alive are followed, and allocated bytes become a point
  /// of the growth series. Needs a source.
  [[nodiscard]] LeakCall track(std::string_view name) { return LeakCall(*this, name); }

  /// Adds a profiled call's memory_after to the growth series of its name; a call that a
  /// track() of the same name enclosed (or was enclosed by) counts once.
  void observe(const ProfileResult& result);
  void observe(const std::vector<ProfileResult>& results);
  /// Adds one point (bytes in use after a call of `name`) to its growth series.
  void add_point(std::string_view name, std::int64_t bytes_after);

  [[nodiscard]] LeakReport report() const;

  /// Forgets every name.
  void clear();

  [[nodiscard]] const LeakDetectorOptions& options() const noexcept { return options_; }

 private:
  friend class LeakCall;

  struct Followed {
    detail::LiveBlock block;
    std::uint64_t call = 0;      // the call that allocated it
    std::uint64_t survived = 0;  // later calls it was alive through
  };
  /// When a call ran: seconds since the Unix epoch (MemorySnapshot::timestamp's clock).
  struct Interval {
    double begin = 0.0;
    double end = 0.0;
  };
  struct NameState {
    std::uint64_t calls = 0;
    std::deque<Interval> seen;        // the newest calls' intervals, where known (kSeenCalls at most)
    bool last_in_series = false;      // the newest point is series.back() (not a warm-up call)
    std::deque<std::int64_t> series;  // newest `window` points after warm-up
    std::vector<Followed> followed;
    std::uint64_t tracked_calls = 0;  // calls through track() (index of survivors)
  };

  NameState& state(std::string_view name);

  static constexpr std::size_t kSeenCalls = 4096;

  void add_point_locked(NameState& st, std::int64_t bytes_after, std::optional<Interval> when);
  std::vector<detail::LiveBlock> live_now() const;
  void end_call(std::string_view name, const std::vector<detail::LiveBlock>& at_entry, double began);
  [[nodiscard]] MemoryGrowth judge_growth(const std::string& name, const NameState& st) const;
  void add_survivors(const std::string& name, const NameState& st, std::vector<SurvivingAllocations>& out) const;

  std::shared_ptr<MemorySource> source_;
  LeakDetectorOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, NameState, std::less<>> names_;
};

#ifdef GPUMEMPROF_COMPILED_LIB
// Compiled once for the default allocator's type, in the gpumemprof library (lib/profiler.cpp).
extern template LeakDetector::LeakDetector(CachingAllocator<AnyBackend>&, LeakDetectorOptions);
#endif

GPUMEMPROF_NAMESPACE_END

// The bodies: in the compiled library under GPUMEMPROF_COMPILED_LIB (lib/profiler.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/profiler/leak_detector-inl.hpp"
#endif
