// Layer 4: GPUMemoryProfiler's and ProfileScope's member bodies. Included by profiler.hpp in
// header-only mode; compiled once in the library (lib/profiler.cpp) for GPUMEMPROF_COMPILED_LIB
// programs. Not a header to include on its own.
#pragma once

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gpumemprof/history/annotations.hpp"
#include "gpumemprof/history/stacks.hpp"
#include "gpumemprof/profiler/profiler.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

GPUMEMPROF_FUNC std::shared_ptr<std::atomic<std::uint32_t>> open_scope_counter(const void* profiler) {
  using Counter = std::shared_ptr<std::atomic<std::uint32_t>>;
  thread_local std::vector<std::pair<const void*, Counter>> counters;
  for (auto& [owner, counter] : counters) {
    if (owner == profiler) return counter;
  }
  // Forget profilers with no open scope left (a later one may reuse the address: it starts at 0).
  std::erase_if(counters, [](const auto& c) { return c.second.use_count() == 1 && c.second->load() == 0; });
  return counters.emplace_back(profiler, std::make_shared<std::atomic<std::uint32_t>>(0)).second;
}

}  // namespace detail

GPUMEMPROF_FUNC std::vector<MemorySnapshot> GPUMemoryProfiler::snapshots() const {
  std::lock_guard lock(samples_mutex_);
  return samples_.to_vector();
}

GPUMEMPROF_FUNC std::vector<ProfileResult> GPUMemoryProfiler::results() const {
  std::lock_guard lock(results_mutex_);
  return results_.to_vector();
}

GPUMEMPROF_FUNC MemorySnapshot GPUMemoryProfiler::baseline() const {
  std::lock_guard lock(results_mutex_);
  return baseline_;
}

GPUMEMPROF_FUNC GPUMemoryProfiler::~GPUMemoryProfiler() {
  sampler_.stop();
  close_window(baseline_window_);
}

GPUMEMPROF_FUNC GPUMemoryProfiler::GPUMemoryProfiler(ProfilerOptions options)
    : GPUMemoryProfiler(make_memory_source(resolve(options), options.level), options) {}

GPUMEMPROF_FUNC GPUMemoryProfiler::GPUMemoryProfiler(std::shared_ptr<MemorySource> source, const ProfilerOptions& options)
    : options_(options), source_(std::move(source)), results_(options_.max_results), samples_(options_.max_snapshots) {
  if (source_ == nullptr) throw std::invalid_argument("GPUMemoryProfiler: null memory source");
  options_.level = source_->level();
  baseline_ = take_snapshot("baseline");
  baseline_window_ = open_baseline_window(baseline_);
}

GPUMEMPROF_FUNC std::uint64_t GPUMemoryProfiler::open_baseline_window(const MemorySnapshot& baseline) {
  return source_->allocator_level() ? source_->open_peak_window()
                                    : open_device_window(baseline.device_used_memory.value_or(0));
}

GPUMEMPROF_FUNC void GPUMemoryProfiler::close_window(std::uint64_t id) noexcept {
  try {
    (void)(source_->allocator_level() ? source_->close_peak_window(id) : close_device_window(id));
  } catch (...) {  // NOLINT(bugprone-empty-catch): an unknown id has nothing to close
  }
}

GPUMEMPROF_FUNC void GPUMemoryProfiler::start_monitoring(std::chrono::nanoseconds interval) {
  (void)sampler_.start_unless_running(interval, [this] { sample_now(); });
}

GPUMEMPROF_FUNC void GPUMemoryProfiler::sample_now() {
  MemorySnapshot s = take_snapshot("monitoring");
  if (!source_->allocator_level()) {
    std::lock_guard lock(device_mutex_);
    device_windows_.on_value(s.device_used_memory.value_or(0));
  }
  std::lock_guard lock(samples_mutex_);
  samples_.push(std::move(s));
}

GPUMEMPROF_FUNC std::uint64_t GPUMemoryProfiler::open_device_window(std::int64_t used) {
  std::lock_guard lock(device_mutex_);
  return device_windows_.open(used);
}

GPUMEMPROF_FUNC std::int64_t GPUMemoryProfiler::close_device_window(std::uint64_t id) {
  std::lock_guard lock(device_mutex_);
  return device_windows_.close(id);
}

GPUMEMPROF_FUNC std::int64_t GPUMemoryProfiler::peak_of_device_window(std::uint64_t id) const {
  std::lock_guard lock(device_mutex_);
  return device_windows_.peak(id);
}

GPUMEMPROF_FUNC std::int64_t GPUMemoryProfiler::current_usage() const {
  if (source_->allocator_level()) return source_->gauges().allocated_bytes;
  const MemInfo info = source_->mem_get_info();
  return static_cast<std::int64_t>(info.total - info.free);
}

// Entry: everything that can throw comes before the peak window opens; the clock is read last,
// so the entry reading is not timed. Exit: the clock is read first, the window closed next.
GPUMEMPROF_FUNC void GPUMemoryProfiler::enter(ProfileScope& s) {
  if (options_.collect_stack_traces && stacks_available) {
    constexpr std::size_t max_frames = 32;
    s.stack_.resize(max_frames);
    s.stack_.resize(capture_stack(s.stack_.data(), max_frames));
  }
  if (options_.synchronize) source_->synchronize();
  s.gauges_before_ = source_->gauges();
  detail::fill_reading(s.before_, *source_, s.gauges_before_, s.name_, clock::time_point{}, scope_reading());
  s.window_ = source_->allocator_level() ? source_->open_peak_window()
                                         : open_device_window(s.before_.device_used_memory.value_or(0));
  auto open_scopes = detail::open_scope_counter(this);
  s.hooks_.enter(s.name_.c_str());
  // While history is recorded the scope is also an annotated range of its name, as PyTorch's
  // record_function is: "train_step" scopes are then the snapshot's steps (analysis/steps.hpp).
  if (auto& sinks = detail::AnnotationSinks::instance(); sinks.active()) {
    s.annotation_ = detail::MetadataStrings::instance().intern(s.name_);
    sinks.emit(s.annotation_, true);
  }
  s.depth_ = open_scopes->fetch_add(1);  // nothing below throws
  s.open_scopes_ = std::move(open_scopes);
  s.start_ = clock::now();
  s.before_.timestamp = detail::wall_seconds(s.start_);
}

GPUMEMPROF_FUNC ProfileResult GPUMemoryProfiler::finish(ProfileScope& s, bool unwinding, std::exception_ptr& sync_error) {
  std::optional<std::string> sync_message;
  if (options_.synchronize) {
    try {
      source_->synchronize();
    } catch (const std::exception& e) {
      sync_error = std::current_exception();
      sync_message = std::string("device synchronize failed: ") + e.what();
    }
  }
  const auto end = clock::now();
  if (s.annotation_ != 0) detail::AnnotationSinks::instance().emit(std::exchange(s.annotation_, 0), false);
  if (s.open_scopes_) s.open_scopes_->fetch_sub(1);
  const bool allocator_level = source_->allocator_level();
  const AllocatorGauges after = source_->gauges();
  ProfileResult r;
  r.name = std::move(s.name_);
  r.device = source_->device_name();
  // Hooks always see an exit, even when building the result throws.
  struct HookExit {
    detail::EnteredHooks& hooks;
    const ProfileResult& result;
    ~HookExit() { hooks.exit(result); }
  } hook_exit{s.hooks_, r};
  const std::int64_t window_peak =
      allocator_level ? source_->close_peak_window(s.window_) : close_device_window(s.window_);

  r.allocator_level = allocator_level;
  r.depth = s.depth_;
  r.execution_time = std::chrono::duration<double>(end - s.start_).count();
  r.memory_before = std::move(s.before_);
  detail::fill_reading(r.memory_after, *source_, after, r.name, end, scope_reading());
  if (allocator_level) {
    const AllocatorGauges& before = s.gauges_before_;
    r.memory_allocated = static_cast<std::int64_t>(after.total_allocated_bytes - before.total_allocated_bytes);
    r.memory_freed = static_cast<std::int64_t>(after.total_freed_bytes - before.total_freed_bytes);
    if (options_.track_tensors) {
      r.tensors_created = static_cast<std::int64_t>(after.total_allocations - before.total_allocations);
      r.tensors_deleted = static_cast<std::int64_t>(after.total_frees - before.total_frees);
    }
  }
  MemorySnapshot& peak = r.memory_peak;
  const MemorySnapshot& b = r.memory_before;
  const MemorySnapshot& a = r.memory_after;
  peak = a;
  peak.reserved_memory = std::max(b.reserved_memory, a.reserved_memory);
  peak.active_memory = std::max(b.active_memory, a.active_memory);
  peak.inactive_memory = std::max(b.inactive_memory, a.inactive_memory);
  peak.cpu_memory = std::max(b.cpu_memory, a.cpu_memory);
  if (allocator_level) {
    peak.allocated_memory = std::max({window_peak, b.allocated_memory, a.allocated_memory});
  } else {
    peak.device_used_memory =
        std::max({window_peak, b.device_used_memory.value_or(0), a.device_used_memory.value_or(0)});
  }
  if (!s.stack_.empty()) {
    auto frames = std::make_shared<std::vector<Frame>>();
    bool user_code = false;
    for (const std::uintptr_t address : s.stack_) {
      const Frame& f = Symbolizer::instance().frame(address);
      user_code = user_code || !Symbolizer::is_internal(f);  // drop the profiler's own frames
      if (user_code) frames->push_back(f);
    }
    r.memory_before.stack_trace = std::move(frames);
    r.memory_after.stack_trace = r.memory_before.stack_trace;
    peak.stack_trace = r.memory_before.stack_trace;
  }
  if (s.exception_message_) {
    r.exception_message = std::move(s.exception_message_);
  } else if (unwinding) {
    r.exception_message = "unknown exception (the scope was left by unwinding)";
  } else if (sync_message) {
    r.exception_message = std::move(sync_message);  // an asynchronous failure of the body's work
  }
  s.hooks_.exit(r);  // before `r` may be moved out; the guard's exit is then a no-op
  return r;
}

GPUMEMPROF_FUNC void GPUMemoryProfiler::record(ProfileResult result) {
  std::lock_guard lock(results_mutex_);
  summary_.add(result);
  results_.push(std::move(result));
}

GPUMEMPROF_FUNC ProfileSummary GPUMemoryProfiler::get_summary() const {
  ProfileSummary s;
  s.device = source_->device_name();
  s.allocator_level = source_->allocator_level();
  s.current_memory_usage = current_usage();
  {
    std::lock_guard lock(results_mutex_);
    summary_.fill(s);
    const std::int64_t since_baseline =
        s.allocator_level ? source_->peak_window(baseline_window_) : peak_of_device_window(baseline_window_);
    s.peak_memory_usage = std::max(s.peak_memory_usage, since_baseline);
    s.baseline_memory_usage = s.allocator_level ? baseline_.allocated_memory : baseline_.device_used_memory.value_or(0);
    s.results_dropped = results_.dropped();
  }
  s.memory_change_from_baseline = s.current_memory_usage - s.baseline_memory_usage;
  s.monitoring_active = sampler_.running();
  {
    std::lock_guard lock(samples_mutex_);
    s.snapshots_collected = samples_.size();
  }
  return s;
}

GPUMEMPROF_FUNC void GPUMemoryProfiler::clear_results() {
  MemorySnapshot fresh = take_snapshot("baseline");
  {
    std::lock_guard lock(results_mutex_);
    results_.clear();
    summary_.clear();
    close_window(baseline_window_);
    baseline_window_ = open_baseline_window(fresh);
    baseline_ = std::move(fresh);
  }
  std::lock_guard lock(samples_mutex_);
  samples_.clear();
}

// ------------------------------------------------------------------------------------------------

GPUMEMPROF_FUNC ProfileScope::ProfileScope(GPUMemoryProfiler& profiler, std::string_view name)
    : profiler_(&profiler), name_(name), uncaught_at_entry_(std::uncaught_exceptions()) {
  profiler.enter(*this);
}

GPUMEMPROF_FUNC ProfileScope::ProfileScope(ProfileScope&& other) noexcept
    : profiler_(std::exchange(other.profiler_, nullptr)),
      name_(std::move(other.name_)),
      uncaught_at_entry_(other.uncaught_at_entry_),
      start_(other.start_),
      gauges_before_(other.gauges_before_),
      before_(std::move(other.before_)),
      window_(other.window_),
      open_scopes_(std::move(other.open_scopes_)),
      depth_(other.depth_),
      stack_(std::move(other.stack_)),
      exception_message_(std::move(other.exception_message_)),
      hooks_(std::exchange(other.hooks_, detail::EnteredHooks{})),
      annotation_(std::exchange(other.annotation_, 0)) {}

GPUMEMPROF_FUNC ProfileScope::~ProfileScope() {
  if (profiler_ == nullptr) return;
  GPUMemoryProfiler& p = *std::exchange(profiler_, nullptr);
  try {
    std::exception_ptr sync_error;  // nowhere to report it from a destructor
    p.record(p.finish(*this, std::uncaught_exceptions() > uncaught_at_entry_, sync_error));
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

GPUMEMPROF_FUNC ProfileResult ProfileScope::stop() {
  if (profiler_ == nullptr) throw std::logic_error("ProfileScope::stop: the scope has already ended");
  GPUMemoryProfiler& p = *std::exchange(profiler_, nullptr);
  std::exception_ptr sync_error;
  ProfileResult r = p.finish(*this, std::uncaught_exceptions() > uncaught_at_entry_, sync_error);
  p.record(r);
  if (sync_error) std::rethrow_exception(sync_error);
  return r;
}

GPUMEMPROF_NAMESPACE_END
