// Layer 1: naming a device. A Device is "cuda:N" (a CUDA GPU), "sim:N" (a simulated device,
// see simulated.hpp) or "host" (host memory). Construction validates that the device exists and
// otherwise throws DeviceError naming what does exist.
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

enum class DeviceKind : unsigned char { cuda, sim, host };

class Device {
 public:
  /// Number of simulated devices ("sim:0" ... "sim:7").
  static constexpr int simulated_device_count = 8;

  /// The current device: $GPUMEMPROF_DEVICE when set, else the calling thread's current CUDA
  /// device, else "sim:0" when no GPU is visible.
  Device() : Device(current()) {}
  /// CUDA device `index`.
  Device(int index) : Device(checked(DeviceKind::cuda, index, std::to_string(index))) {}  // NOLINT
  /// "cuda:N", "cuda" (current CUDA device), "sim:N", "sim" (= sim:0), "host", or "auto"/"" (current).
  Device(std::string_view spec) : Device(parse(spec)) {}               // NOLINT(google-explicit-constructor)
  Device(const char* spec) : Device(std::string_view(spec)) {}         // NOLINT(google-explicit-constructor)
  Device(const std::string& spec) : Device(std::string_view(spec)) {}  // NOLINT

  static Device cuda(int index) { return checked(DeviceKind::cuda, index, "cuda:" + std::to_string(index)); }
  static Device sim(int index) { return checked(DeviceKind::sim, index, "sim:" + std::to_string(index)); }
  static Device host() { return Device(DeviceKind::host, 0); }

  static Device current();

  static Device parse(std::string_view spec);

  /// Every device that can be used now, e.g. "cuda:0, sim:0 ... sim:7, host".
  static std::string available_list();

  [[nodiscard]] DeviceKind kind() const noexcept { return kind_; }
  [[nodiscard]] int index() const noexcept { return index_; }
  [[nodiscard]] bool is_cuda() const noexcept { return kind_ == DeviceKind::cuda; }
  [[nodiscard]] bool is_simulated() const noexcept { return kind_ == DeviceKind::sim; }
  [[nodiscard]] bool is_host() const noexcept { return kind_ == DeviceKind::host; }
  [[nodiscard]] std::string str() const {
    switch (kind_) {
      case DeviceKind::cuda: return "cuda:" + std::to_string(index_);
      case DeviceKind::sim: return "sim:" + std::to_string(index_);
      case DeviceKind::host: return "host";
    }
    return "host";
  }
  friend bool operator==(const Device&, const Device&) = default;

 private:
  Device(DeviceKind kind, int index) noexcept : kind_(kind), index_(index) {}

  static Device checked(DeviceKind kind, int index, const std::string& spelled);

  DeviceKind kind_ = DeviceKind::sim;
  int index_ = 0;
};

GPUMEMPROF_NAMESPACE_END

// The bodies of parse(), current() and the checks (they ask the CUDA runtime): in the compiled
// library under GPUMEMPROF_COMPILED_LIB (lib/device.cpp).
#ifndef GPUMEMPROF_COMPILED_LIB
#include "gpumemprof/device/device-inl.hpp"
#endif
