// Analysis layer: PyTorch's reduction buffers in a probe's request stream, and where their growth
// stops (the forecast, forecast.hpp, applies it).
//
// A reduction that splits its input across thread blocks (ATen's CUDA reductions: a sum or a mean
// over a long dimension, such as the gradient of a bias or of a norm's weight, summed over batch x
// tokens) takes two requests for one kernel: a buffer for the blocks' partial results, then a
// semaphore of 4 bytes per output block, and frees both after the launch, the semaphore first. The
// buffer grows with the reduced length until the blocks fill the device (the SM count times the
// blocks each SM runs), then stays; at 16 times that length it grows again, at a sixteenth of the
// rate. On an H200 (132 SMs, torch 2.11) every such buffer in ViT-B/16, GPT-2, BERT and ConvNeXt-T
// stopped at 132 MiB (132.75 MiB where the output blocks do not divide the grid); a line through
// two probes puts them at 300 MiB and more at the target.
//
// Found by that signature: a request, then one of at most 64 KiB, a multiple of 4 bytes, on the same
// stream, freed before the first, and no other request made before the first is freed. At the target
// such a buffer keeps its size model up to the cap, stops there, and grows past it only as size / 16
// (one within 1% of the cap in the reference has stopped at its own size; one past it already keeps
// its fit, which follows that slower growth).
// (Below the cap the block shape PyTorch picks changes with the size, so a buffer may grow by less
// than its law there too; no rule on sizes alone gets that exact.) The cap is the one given
// (ForecastOptions::reduction_cap; gpumemprof_torch.forecast measures it on the device), else one the
// two largest probes show: at least two buffers of the reference's largest reduction-buffer size
// reached it by growing by less than 0.95 of the program's law. With no cap known, a buffer forecast
// above the largest one the probes made is uncertain: the range keeps it at that size (the cap is no
// lower).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpumemprof/analysis/forecast_rules.hpp"
#include "gpumemprof/analysis/request_stream.hpp"
#include "gpumemprof/analysis/size_model.hpp"
#include "gpumemprof/analysis/stream_alignment.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// What the reduction-buffer rule found (the forecast copies it into its result).
struct ReductionBufferFacts {
  std::size_t buffers = 0;    ///< reduction buffers in the reference's stream
  std::uint64_t cap = 0;      ///< where they stop (0: none known)
  bool cap_shown = false;     ///< the probes showed it (else it was given)
  std::size_t stopped = 0;    ///< buffers the cap lowered at the target
  std::size_t unbounded = 0;  ///< with no cap known: buffers forecast above every one the probes made
  std::uint64_t largest = 0;  ///< the largest reduction buffer the reference made
};

/// One size of reduction buffer a stream requested, and how often.
struct ReductionBufferSize {
  std::uint64_t bytes = 0;
  std::size_t count = 0;
};

namespace detail {

/// Per request of `s`: 1 when it is a reduction buffer (see the file comment).
inline std::vector<std::uint8_t> reduction_buffers(const RequestStream& s) {
  constexpr std::uint64_t kLargestSemaphore = 64 * 1024;
  const std::vector<ProbeRequest>& r = s.requests;
  std::vector<std::uint8_t> out(r.size(), 0);
  for (std::size_t i = 0; i + 1 < r.size(); ++i) {
    const ProbeRequest& buffer = r[i];
    const ProbeRequest& semaphore = r[i + 1];
    if (buffer.free_event == ProbeRequest::kNeverFreed || semaphore.free_event > buffer.free_event) continue;
    if (semaphore.stream != buffer.stream || semaphore.size == 0 || semaphore.size > kLargestSemaphore ||
        semaphore.size % 4 != 0 || semaphore.size >= buffer.size)
      continue;
    if (i + 2 < r.size() && r[i + 2].alloc_event < buffer.free_event) continue;
    out[i] = 1;
  }
  return out;
}

/// The cap `ref` and `near` show (see the file comment); 0 when they show none. `largest`: the
/// largest of `ref`'s reduction buffers; `law`: q, or q^2 by an image side.
inline std::uint64_t shown_reduction_cap(const RequestStream& ref, const RequestStream& near, const StreamAlignment& al,
                                         const std::vector<std::uint8_t>& buffer, std::uint64_t largest, double law) {
  std::size_t reached = 0;
  for (std::size_t i = 0; i < ref.requests.size(); ++i) {
    if (buffer[i] == 0 || ref.requests[i].size != largest) continue;
    const auto got = static_cast<double>(aligned_size(near, al, i));  // 0: none aligned
    if (got > 0 && got < static_cast<double>(largest) && static_cast<double>(largest) < 0.95 * got * law) ++reached;
  }
  return reached >= 2 ? largest : 0;
}

/// Applies the file comment's rule: `ref` is the largest probe, `near` the next one (`law` as
/// shown_reduction_cap), `given_cap` the cap given (0: none).
inline ReductionBufferFacts apply_reduction_cap(const RequestStream& ref, const RequestStream& near,
                                                const StreamAlignment& al, double law, std::uint64_t given_cap,
                                                ForecastRuleState st) {
  ReductionBufferFacts f;
  const std::vector<std::uint8_t> buffer = reduction_buffers(ref);
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] == 0) continue;
    ++f.buffers;
    f.largest = std::max(f.largest, ref.requests[i].size);
  }
  if (f.buffers == 0) return f;
  f.cap = given_cap;
  if (f.cap == 0) {
    f.cap = shown_reduction_cap(ref, near, al, buffer, f.largest, law);
    f.cap_shown = f.cap != 0;
  }
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] == 0) continue;
    if (f.cap == 0) {
      // The cap is no lower than the largest buffer the probes made; above it, the range keeps them there.
      if (st.sizes[i] <= f.largest) continue;
      st.kept[i] = std::min(st.kept[i], std::max(f.largest, ref.requests[i].size));
      st.grown[i] = std::max(st.grown[i], st.sizes[i]);
      if (st.irregular_at[i] == 0) ++st.irregular;
      st.irregular_at[i] = 1;
      ++f.unbounded;
      continue;
    }
    // A buffer within 1% of the cap in the reference has stopped, at its own size: by the shape of
    // its output blocks one stops at 132 MiB on an H200, another at 132.75.
    const std::uint64_t own = ref.requests[i].size;
    if (own > f.cap + f.cap / 100) continue;  // past the cap already: its fit follows the slower growth
    const bool stopped = own >= f.cap - f.cap / 100;
    if (!stopped && st.sizes[i] <= f.cap) continue;
    const std::uint64_t size = std::max(stopped ? own : f.cap, st.sizes[i] / 16);
    // A cap the probes show is their largest buffer, which may be one that stopped up to 1% below
    // the device's: the range grows those the cap lowers by as much.
    const std::uint64_t high = std::max(stopped || !f.cap_shown ? size : f.cap + f.cap / 99, st.sizes[i] / 16);
    if (st.sizes[i] == size && st.grown[i] == high && st.kept[i] == size) continue;  // settled already
    st.sizes[i] = st.kept[i] = size;
    st.grown[i] = high;
    st.fits[i] = SizeFit{SizeModel::constant, static_cast<double>(size), 0, 0};
    const std::uint8_t uncertain = high != size ? 1 : 0;
    st.irregular += uncertain;
    st.irregular -= st.irregular_at[i];
    st.irregular_at[i] = uncertain;
    ++f.stopped;
  }
  return f;
}

}  // namespace detail

/// The sizes of `s`'s reduction buffers (see the file comment), largest first. On a device, the
/// largest of a run whose reductions are long enough is where they stop (the forecast's cap).
[[nodiscard]] inline std::vector<ReductionBufferSize> reduction_buffer_sizes(const RequestStream& s) {
  const std::vector<std::uint8_t> buffer = detail::reduction_buffers(s);
  std::vector<ReductionBufferSize> out;
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] != 0) out.push_back({s.requests[i].size, 1});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::vector<ReductionBufferSize> merged;
  for (const ReductionBufferSize& r : out) {
    if (!merged.empty() && merged.back().bytes == r.bytes) {
      ++merged.back().count;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

GPUMEMPROF_NAMESPACE_END
