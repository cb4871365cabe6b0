// A synthetic but realistic Snapshot for the HTML report's tests: a small caching allocator
// (PyTorch's pools, segment sizes, best fit, split and merge) driven by a simulated training loop
// (weights, optimizer state, per-layer activations freed in reverse in the backward pass, small
// temporaries, gradients, cross-stream frees that complete late, an empty_cache, an OOM), with
// C++-looking stacks whose innermost frames are the allocator's own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpumemprof/history/snapshot.hpp"

namespace html_test {

namespace gmp = gpumemprof;

struct SyntheticOptions {
  std::size_t target_events = 9000;  ///< stop after the iteration that reaches this many entries
  int layers = 24;
  bool with_trace = true;   ///< false: segments only (history off)
  bool with_frames = true;  ///< false: entries and blocks carry no frames
  bool with_oom = true;
  bool with_annotations = true;
  std::uint64_t seed = 42;
};

class MiniCachingAllocator {
 public:
  static constexpr std::uint64_t kMiB = 1024 * 1024;

  MiniCachingAllocator(gmp::Snapshot& snap, bool record) : snap_(snap), record_(record) {
    if (snap_.device_traces.empty()) snap_.device_traces.resize(1);
  }

  void set_time(std::int64_t t) { now_ = t; }

  std::uint64_t allocate(std::uint64_t requested, const gmp::Frames& frames, std::uint64_t stream = 0) {
    const std::uint64_t rounded = std::max<std::uint64_t>(512, (requested + 511) / 512 * 512);
    const bool small = rounded <= kMiB;
    auto& pool = small ? small_free_ : large_free_;
    auto it = pool.lower_bound({rounded, 0});
    std::uint64_t addr = 0;
    if (it != pool.end()) {
      addr = it->second;
      pool.erase(it);
    } else {
      const std::uint64_t seg_size = small                 ? 2 * kMiB
                                     : rounded < 10 * kMiB ? 20 * kMiB
                                                           : (rounded + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
      addr = next_segment_;
      next_segment_ += seg_size + 64 * kMiB;  // leave gaps, like a real address space
      segments_[addr] = Seg{seg_size, !small, stream, frames};
      blocks_[addr] = Block{seg_size, addr, gmp::BlockState::inactive, 0, nullptr};
      trace(gmp::TraceAction::segment_alloc, addr, seg_size, frames, stream);
    }
    Block& b = blocks_[addr];
    const std::uint64_t rest = b.size - rounded;
    if (small ? rest >= 512 : rest > kMiB) {
      blocks_[addr + rounded] = Block{rest, b.segment, gmp::BlockState::inactive, 0, nullptr};
      pool.insert({rest, addr + rounded});
      blocks_[addr].size = rounded;
    }
    Block& nb = blocks_[addr];
    nb.state = gmp::BlockState::active_allocated;
    nb.requested = requested;
    nb.frames = frames;
    trace(gmp::TraceAction::alloc, addr, requested, frames, stream);
    return addr;
  }

  /// Frees now, or (pending) leaves the block active_pending_free until complete_pending().
  void deallocate(std::uint64_t addr, const gmp::Frames& frames, bool pending = false) {
    Block& b = blocks_.at(addr);
    trace(gmp::TraceAction::free_requested, addr, b.requested, frames, 0);
    if (pending) {
      b.state = gmp::BlockState::active_pending_free;
      pending_.push_back({addr, frames});
      return;
    }
    complete(addr, frames);
  }

  void complete_pending() {
    for (const auto& [addr, frames] : pending_) complete(addr, frames);
    pending_.clear();
  }

  void oom(std::uint64_t requested, std::uint64_t device_free) {
    trace(gmp::TraceAction::oom, device_free, requested, nullptr, 0);
  }

  /// Releases every fully free segment (PyTorch's empty_cache).
  void empty_cache() {
    for (auto it = segments_.begin(); it != segments_.end();) {
      const Block& b = blocks_.at(it->first);
      if (b.state == gmp::BlockState::inactive && b.size == it->second.size) {
        auto& pool = it->second.large ? large_free_ : small_free_;
        pool.erase({b.size, it->first});
        trace(gmp::TraceAction::segment_free, it->first, it->second.size, nullptr, it->second.stream);
        blocks_.erase(it->first);
        it = segments_.erase(it);
      } else {
        ++it;
      }
    }
  }

  /// Writes the allocator's state into the snapshot's segments.
  void fill_segments() const {
    for (const auto& [addr, seg] : segments_) {
      gmp::SnapshotSegment out;
      out.address = addr;
      out.total_size = seg.size;
      out.stream = seg.stream;
      out.is_large = seg.large;
      out.frames = seg.frames;
      for (auto it = blocks_.find(addr); it != blocks_.end() && it->first < addr + seg.size; ++it) {
        const Block& b = it->second;
        const bool active = b.state != gmp::BlockState::inactive;
        out.blocks.push_back({it->first, b.size, active ? b.requested : 0, b.state, active ? b.frames : nullptr});
        if (b.state == gmp::BlockState::active_allocated) out.allocated_size += b.size;
        if (active) {
          out.active_size += b.size;
          out.requested_size += b.requested;
        }
      }
      snap_.segments.push_back(std::move(out));
    }
  }

 private:
  struct Seg {
    std::uint64_t size;
    bool large;
    std::uint64_t stream;
    gmp::Frames frames;
  };
  struct Block {
    std::uint64_t size;
    std::uint64_t segment;
    gmp::BlockState state;
    std::uint64_t requested;
    gmp::Frames frames;
  };

  void complete(std::uint64_t addr, const gmp::Frames& frames) {
    auto it = blocks_.find(addr);
    trace(gmp::TraceAction::free_completed, addr, it->second.requested, frames, 0);
    it->second.state = gmp::BlockState::inactive;
    it->second.requested = 0;
    it->second.frames = nullptr;
    auto& pool = segments_.at(it->second.segment).large ? large_free_ : small_free_;
    auto mergeable = [&](auto j) {
      return j != blocks_.end() && j->second.segment == it->second.segment &&
             j->second.state == gmp::BlockState::inactive;
    };
    if (auto nx = std::next(it); mergeable(nx)) {
      pool.erase({nx->second.size, nx->first});
      it->second.size += nx->second.size;
      blocks_.erase(nx);
    }
    if (it != blocks_.begin()) {
      if (auto pv = std::prev(it); mergeable(pv)) {
        pool.erase({pv->second.size, pv->first});
        pv->second.size += it->second.size;
        blocks_.erase(it);
        it = pv;
      }
    }
    pool.insert({it->second.size, it->first});
  }

  void trace(gmp::TraceAction a, std::uint64_t addr, std::uint64_t size, const gmp::Frames& frames,
             std::uint64_t stream) {
    if (!record_) return;
    gmp::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    e.time_us = now_;
    e.frames = frames;
    snap_.device_traces[0].push_back(std::move(e));
  }

  gmp::Snapshot& snap_;
  bool record_;
  std::int64_t now_ = 0;
  std::uint64_t next_segment_ = 0x7f3a00000000ULL;
  std::map<std::uint64_t, Seg> segments_;
  std::map<std::uint64_t, Block> blocks_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> small_free_, large_free_;  // (size, address)
  std::vector<std::pair<std::uint64_t, gmp::Frames>> pending_;
};

/// A stack: the allocator's frames innermost, then `user` (innermost first).
inline gmp::Frames make_stack(const std::vector<gmp::Frame>& user, bool with_frames) {
  if (!with_frames) return nullptr;
  std::vector<gmp::Frame> f = {
      {"include/gpumemprof/allocator/caching_allocator.hpp", 412,
       "gpumemprof::v0::CachingAllocator<gpumemprof::v0::SimulatedBackend>::allocate(unsigned long, "
       "gpumemprof::v0::Stream)"},
      {"include/gpumemprof/allocator/default_allocator.hpp", 77, "gpumemprof::v0::raw_alloc(unsigned long)"},
  };
  f.insert(f.end(), user.begin(), user.end());
  return std::make_shared<const std::vector<gmp::Frame>>(std::move(f));
}

/// Simulates training steps of a `layers`-layer network until the trace reaches
/// `target_events` entries, and returns the snapshot taken at the end.
inline gmp::Snapshot make_synthetic_snapshot(const SyntheticOptions& opt = {}) {
  constexpr std::uint64_t kMiB = MiniCachingAllocator::kMiB;
  gmp::Snapshot snap;
  snap.device_traces.resize(1);
  MiniCachingAllocator alloc(snap, opt.with_trace);
  std::mt19937_64 rng(opt.seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::int64_t now = 1'763'600'000'000'000;  // microseconds since the epoch
  auto tick = [&](std::uint64_t lo, std::uint64_t hi) {
    now += static_cast<std::int64_t>(uniform(lo, hi));
    alloc.set_time(now);
  };
  auto annotate = [&](const char* name, bool start) {
    if (opt.with_annotations && opt.with_trace) snap.external_annotations.push_back({name, start, 0, now});
  };

  const bool wf = opt.with_frames;
  const gmp::Frame main_f{"examples/train.cpp", 211, "main"};
  const gmp::Frame step_f{"examples/train.cpp", 148, "train_step(Model&, Batch const&)"};
  const gmp::Frames s_weight = make_stack({{"examples/model.hpp", 58, "Linear::Linear(int, int)"},
                                           {"examples/model.hpp", 131, "Model::Model(Config const&)"},
                                           main_f},
                                          wf);
  const gmp::Frames s_adam = make_stack({{"examples/optim.hpp", 40, "Adam::init_state(Tensor const&)"},
                                         {"examples/optim.hpp", 77, "Adam::step()"},
                                         step_f,
                                         main_f},
                                        wf);
  const gmp::Frames s_batch = make_stack({{"examples/data.hpp", 92, "DataLoader::next()"},
                                          {"examples/train.cpp", 140, "train_step(Model&, Batch const&)"},
                                          main_f},
                                         wf);
  const gmp::Frames s_loss =
      make_stack({{"examples/loss.hpp", 25, "cross_entropy(Tensor const&, Tensor const&)"}, step_f, main_f}, wf);
  const gmp::Frames s_free = make_stack({{"examples/tensor.hpp", 33, "Tensor::~Tensor()"}, step_f, main_f}, wf);
  const gmp::Frames s_opt_tmp = make_stack({{"examples/optim.hpp", 88, "Adam::step()"}, step_f, main_f}, wf);
  std::vector<gmp::Frames> s_act, s_tmp, s_gin, s_wgrad;
  const char* kinds[] = {"Attention::forward(Tensor const&)", "MLP::forward(Tensor const&)",
                         "LayerNorm::forward(Tensor const&)"};
  for (int l = 0; l < opt.layers; ++l) {
    const gmp::Frame layer{"examples/model.hpp", 200 + 10 * (l % 3), kinds[l % 3]};
    const gmp::Frame fwd{"examples/model.hpp", 305, "Model::forward(Tensor const&)"};
    const gmp::Frame bwd{"examples/autograd.hpp", 61, "backward(Tensor const&)"};
    s_act.push_back(make_stack(
        {{"examples/ops.hpp", 18 + l % 3, "matmul(Tensor const&, Tensor const&)"}, layer, fwd, step_f, main_f}, wf));
    s_tmp.push_back(make_stack({{"examples/ops.hpp", 44, "softmax(Tensor const&)"}, layer, fwd, step_f, main_f}, wf));
    s_gin.push_back(make_stack({{"examples/ops.hpp", 71, "matmul_backward(Tensor const&)"}, bwd, step_f, main_f}, wf));
    s_wgrad.push_back(
        make_stack({{"examples/ops.hpp", 90, "Linear::grad_weight(Tensor const&)"}, bwd, step_f, main_f}, wf));
  }

  std::vector<std::uint64_t> weight_size(static_cast<std::size_t>(opt.layers)), act_size(weight_size.size());
  for (auto& w : weight_size) w = uniform(1, 24) * kMiB + uniform(0, 1023) * 512;
  for (auto& a : act_size) a = uniform(6, 40) * kMiB + uniform(0, 4095) * 256;
  std::vector<std::uint64_t> weights, adam;
  tick(10, 50);
  for (const std::uint64_t w : weight_size) {
    weights.push_back(alloc.allocate(w, s_weight));
    weights.push_back(alloc.allocate(uniform(1, 64) * 1024, s_weight));  // bias
    tick(5, 40);
  }
  auto entries = [&] { return snap.device_traces[0].size(); };
  auto done = [&] { return opt.with_trace ? entries() >= opt.target_events : true; };
  for (int iter = 0; !done() || iter < 2; ++iter) {
    if (!opt.with_trace && iter >= 6) break;
    tick(200, 900);
    const std::uint64_t batch = alloc.allocate(uniform(2, 6) * kMiB, s_batch, 0);
    annotate("forward", true);
    std::vector<std::uint64_t> acts;
    for (int l = 0; l < opt.layers; ++l) {
      const auto L = static_cast<std::size_t>(l);
      tick(20, 120);
      acts.push_back(alloc.allocate(act_size[L] + uniform(0, 255) * 512, s_act[L]));
      for (int k = 0; k < 2; ++k) {  // short-lived temporaries
        const std::uint64_t t = alloc.allocate(uniform(1, 2048) * 256, s_tmp[L]);
        tick(2, 15);
        alloc.deallocate(t, s_free);
      }
    }
    const std::uint64_t loss = alloc.allocate(4096, s_loss);
    annotate("forward", false);
    annotate("backward", true);
    std::vector<std::uint64_t> grads;
    for (int l = opt.layers - 1; l >= 0; --l) {
      const auto L = static_cast<std::size_t>(l);
      tick(20, 150);
      const std::uint64_t gin = alloc.allocate(act_size[L] / 2 + uniform(0, 255) * 512, s_gin[L]);
      grads.push_back(alloc.allocate(weight_size[L], s_wgrad[L]));
      tick(5, 60);
      // Some activations are freed from a side stream: their frees complete later.
      alloc.deallocate(acts[L], s_free, l % 7 == 3);
      alloc.deallocate(gin, s_free);
    }
    alloc.deallocate(loss, s_free);
    annotate("backward", false);
    annotate("optimizer.step", true);
    tick(30, 200);
    if (adam.empty()) {
      for (const std::uint64_t w : weight_size) {
        adam.push_back(alloc.allocate(w, s_adam));
        adam.push_back(alloc.allocate(w, s_adam));
      }
    }
    for (int k = 0; k < 6; ++k) {
      const std::uint64_t t = alloc.allocate(uniform(64, 4096) * 1024, s_opt_tmp);
      tick(3, 30);
      alloc.deallocate(t, s_free);
    }
    for (const std::uint64_t g : grads) alloc.deallocate(g, s_free);
    alloc.complete_pending();
    alloc.deallocate(batch, s_free);
    annotate("optimizer.step", false);
    if (iter == 3) {
      alloc.empty_cache();
      if (opt.with_oom) alloc.oom(96ULL * 1024 * kMiB, 512 * kMiB);
    }
  }
  // The snapshot is taken mid-step: an activation live, one pending free, a temporary.
  tick(100, 300);
  const std::uint64_t act = alloc.allocate(act_size[0], s_act[0]);
  const std::uint64_t tmp = alloc.allocate(3 * kMiB, s_tmp[0]);
  alloc.deallocate(act, s_free, true);
  (void)tmp;
  alloc.fill_segments();
  return snap;
}

}  // namespace html_test
