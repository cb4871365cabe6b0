// Held-out workloads of the shared traces' kinds, generated with fixed seeds (not the traces):
// variable sequence lengths, mixed precision, two streams. The compacting policy
// (compacting_expandable_segments:True) must keep peak reserved within 3.1% of what a layout
// whose pages never move between streams needs (the streams' own peaks added up; the peak live
// bytes with one stream), and at most the default policy's figure, printed beside it for
// comparison (bench/RESULTS.md).
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "catch.hpp"
#include "sim_allocator.hpp"

namespace {

struct Request {
  bool alloc;
  std::size_t id;
  std::size_t bytes;
  gmp::Stream stream;
};

class Workload {
 public:
  std::size_t alloc(std::size_t bytes, gmp::Stream s = {}) {
    ops.push_back({true, next, bytes, s});
    return next++;
  }
  void free(std::size_t id) { ops.push_back({false, id, 0, {}}); }
  std::vector<Request> ops;

 private:
  std::size_t next = 0;
};

constexpr std::size_t kHidden = 768;
constexpr std::size_t kLayers = 12;

// Weights: a GPT-2-small shape (fp32 masters, optionally bf16 copies), allocated once.
std::vector<std::size_t> weights(Workload& w, bool bf16_copies) {
  std::vector<std::size_t> ids;
  ids.push_back(w.alloc(50257 * kHidden * 4));
  for (std::size_t l = 0; l < kLayers; ++l) {
    for (std::size_t n : {3 * kHidden * kHidden, kHidden * kHidden, 4 * kHidden * kHidden, 4 * kHidden * kHidden,
                          3 * kHidden, kHidden, 4 * kHidden, kHidden, kHidden, kHidden}) {
      ids.push_back(w.alloc(n * 4));
      if (bf16_copies) ids.push_back(w.alloc(n * 2));
    }
  }
  return ids;
}

// One training step at sequence length `len`: activations live from forward to backward,
// attention scores (len^2) freed early, gradients accumulated, temporaries in between.
void step(Workload& w, std::mt19937_64& rng, std::size_t batch, std::size_t len, std::size_t elem, gmp::Stream s) {
  std::vector<std::size_t> saved;
  const std::size_t tokens = batch * len;
  for (std::size_t l = 0; l < kLayers; ++l) {
    const std::size_t scores = w.alloc(batch * 12 * len * len * elem, s);
    const std::size_t probs = w.alloc(batch * 12 * len * len * elem, s);
    w.free(scores);
    saved.push_back(probs);
    for (std::size_t n : {3 * kHidden, kHidden, 4 * kHidden, 4 * kHidden, kHidden})
      saved.push_back(w.alloc(tokens * n * elem, s));
    const std::size_t tmp = w.alloc(tokens * kHidden * 4 + (rng() % 4096), s);  // an fp32 upcast, odd size
    w.free(tmp);
  }
  const std::size_t logits = w.alloc(tokens * 50257 * elem, s);
  const std::size_t loss_grad = w.alloc(tokens * 50257 * elem, s);
  w.free(logits);
  std::vector<std::size_t> grads;
  while (!saved.empty()) {
    const std::size_t g = w.alloc(tokens * kHidden * elem * (1 + rng() % 4), s);
    w.free(saved.back());
    saved.pop_back();
    if (saved.size() % 6 == 0) grads.push_back(w.alloc(kHidden * kHidden * 4, s));
    w.free(g);
  }
  w.free(loss_grad);
  for (std::size_t g : grads) w.free(g);
}

struct Outcome {
  std::int64_t peak_live = 0;
  // The peaks of each stream's own live bytes, added up: what a layout whose pages never move
  // between streams holds at least (a block never changes stream, each stream's blocks come from
  // its own reservation).
  std::int64_t stream_peaks = 0;
  std::int64_t peak_reserved = 0;
  [[nodiscard]] double ratio() const { return static_cast<double>(peak_reserved) / static_cast<double>(peak_live); }
};

Outcome replay(const Workload& w, const char* conf) {
  // 16 GiB is ample for these ~3 GiB workloads and keeps the device's address space small enough
  // for ThreadSanitizer's layout (expandable reservations are sized by the capacity).
  SimAlloc s(conf, 16 * GiB);
  std::vector<void*> ptr(w.ops.size(), nullptr);
  std::vector<std::size_t> bytes(w.ops.size(), 0);
  std::vector<gmp::Stream> stream(w.ops.size());
  std::int64_t live = 0;
  std::map<std::uintptr_t, std::pair<std::int64_t, std::int64_t>> per_stream;  // live, peak
  Outcome o;
  for (const Request& r : w.ops) {
    if (r.alloc) {
      ptr[r.id] = s.a.allocate(r.bytes, r.stream);
      bytes[r.id] = r.bytes;
      stream[r.id] = r.stream;
      live += static_cast<std::int64_t>(r.bytes);
      o.peak_live = std::max(o.peak_live, live);
      auto& [cur, peak] = per_stream[r.stream.id];
      cur += static_cast<std::int64_t>(r.bytes);
      peak = std::max(peak, cur);
    } else {
      s.a.deallocate(ptr[r.id]);
      live -= static_cast<std::int64_t>(bytes[r.id]);
      per_stream[stream[r.id].id].first -= static_cast<std::int64_t>(bytes[r.id]);
      ptr[r.id] = nullptr;
    }
  }
  for (const auto& [id, lp] : per_stream) o.stream_peaks += lp.second;
  s.a.validate();
  o.peak_reserved = s.stats().reserved_bytes.all().peak;
  return o;
}

void compare(const char* name, const Workload& w) {
  const Outcome def = replay(w, "");
  const Outcome exp = replay(w, "compacting_expandable_segments:True");
  std::printf(
      "%-22s peak live %7.1f MiB (streams' own peaks %7.1f) | default %7.1f MiB (%.3fx) | expandable %7.1f MiB "
      "(%.3fx)\n",
      name, static_cast<double>(def.peak_live) / MiB, static_cast<double>(def.stream_peaks) / MiB,
      static_cast<double>(def.peak_reserved) / MiB, def.ratio(), static_cast<double>(exp.peak_reserved) / MiB,
      exp.ratio());
  CHECK(exp.peak_live == def.peak_live);
  // Within 3.1% of the streams' own peaks added up: a layout whose pages never move between
  // streams holds at least that (two_streams: 1.485x the peak live bytes), and pages move only
  // for one-page growth (variable_lengths: 1.031x; within 1.03x while large growth moved pages
  // too, pages that then kept moving once the workload repeated).
  CHECK(static_cast<double>(exp.peak_reserved) <= 1.031 * static_cast<double>(exp.stream_peaks));
  CHECK(exp.peak_reserved <= def.peak_reserved);
}

}  // namespace

TEST_CASE("compacting expandable segments on held-out workloads: variable lengths, mixed precision, two streams") {
  {
    Workload w;  // variable sequence lengths, bf16 activations
    std::mt19937_64 rng(7);
    weights(w, false);
    for (int i = 0; i < 12; ++i) step(w, rng, 8, 32 + rng() % 480, 2, {});
    compare("variable_lengths", w);
  }
  {
    Workload w;  // mixed precision: fp32 masters + bf16 copies, fp32 and bf16 steps alternating
    std::mt19937_64 rng(11);
    weights(w, true);
    for (int i = 0; i < 10; ++i) step(w, rng, 4, 128 + 64 * (rng() % 6), i % 2 == 0 ? 2 : 4, {});
    compare("mixed_precision", w);
  }
  {
    Workload w;  // two streams, steps alternating between them
    std::mt19937_64 rng(13);
    weights(w, false);
    for (int i = 0; i < 10; ++i) step(w, rng, 4, 64 + rng() % 256, 2, gmp::Stream(i % 2 == 0 ? 1 : 2));
    compare("two_streams", w);
  }
}
