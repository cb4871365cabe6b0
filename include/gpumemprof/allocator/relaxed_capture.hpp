// Layer 2: a scope in which this thread is in relaxed stream-capture mode (c10's
// CUDAStreamCaptureModeGuard), for the allocator's backend calls that may synchronize.
#pragma once

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {

// While alive, this thread is in relaxed capture mode; restores the previous mode on exit. A
// scope, not a lambda: the lock analysis follows it. Nothing happens on a backend that knows no
// capture.
template <DeviceBackend Backend>
class RelaxedCapture {
 public:
  explicit RelaxedCapture(Backend& b) : b_(b) {
    if constexpr (CaptureAwareBackend<Backend>) old_ = b.exchange_capture_mode(CaptureMode::relaxed);
  }
  ~RelaxedCapture() {
    if constexpr (CaptureAwareBackend<Backend>) {
      try {
        b_.exchange_capture_mode(old_);
      } catch (...) {  // NOLINT(bugprone-empty-catch): restoring this thread's own mode does not fail
      }
    }
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  Backend& b_;
  CaptureMode old_ = CaptureMode::global;
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END
