// Layer 1: naming a device. A Device is "cuda:N" (a CUDA GPU), "sim:N" (a simulated device,
// see simulated.hpp) or "host" (host memory). Construction validates that the device exists and
// otherwise throws DeviceError naming what does exist.
#pragma once

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/cuda.hpp"
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

  static Device current() {
    if (const char* env = std::getenv("GPUMEMPROF_DEVICE"); env != nullptr && *env != '\0') {
      try {
        return parse(env);
      } catch (const DeviceError& e) {
        throw DeviceError(environment_error("GPUMEMPROF_DEVICE", env, e.what()));
      }
    }
    if (cuda_device_count() > 0) {
#if GPUMEMPROF_WITH_CUDA
      return Device(DeviceKind::cuda, cuda_current_device());
#endif
    }
    return Device(DeviceKind::sim, 0);
  }

  static Device parse(std::string_view spec) {
    while (!spec.empty() && (spec.front() == ' ' || spec.front() == '\t')) spec.remove_prefix(1);
    while (!spec.empty() && (spec.back() == ' ' || spec.back() == '\t')) spec.remove_suffix(1);
    const std::string text(spec);
    if (spec.empty() || spec == "auto") return current();
    if (spec == "host") return host();
#if GPUMEMPROF_WITH_CUDA
    if (spec == "cuda") return checked(DeviceKind::cuda, cuda_device_count() > 0 ? cuda_current_device() : 0, text);
#else
    if (spec == "cuda") return checked(DeviceKind::cuda, 0, text);
#endif
    if (spec == "sim") return sim(0);
    const auto colon = spec.find(':');
    const std::string_view kind = spec.substr(0, colon);
    if (colon != std::string_view::npos && (kind == "cuda" || kind == "sim")) {
      int index = -1;
      const std::string_view num = spec.substr(colon + 1);
      const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
      if (ec == std::errc() && end == num.data() + num.size() && !num.empty()) {
        return checked(kind == "cuda" ? DeviceKind::cuda : DeviceKind::sim, index, text);
      }
    }
    if (!spec.empty() && spec.find_first_not_of("0123456789") == std::string_view::npos) {
      int index = -1;
      std::from_chars(spec.data(), spec.data() + spec.size(), index);
      return checked(DeviceKind::cuda, index, text);
    }
    throw DeviceError("unknown device " + quote_input(text) +
                      ": write \"cuda:N\", \"sim:N\", \"host\" or a CUDA device number; available: " +
                      available_list() + (cuda_device_count() == 0 ? " (" + cuda_unavailable_reason() + ")" : ""));
  }

  /// Every device that can be used now, e.g. "cuda:0, sim:0 ... sim:7, host".
  static std::string available_list() {
    std::string out;
    const int n = cuda_device_count();
    for (int i = 0; i < n; ++i) out += "cuda:" + std::to_string(i) + ", ";
    out += "sim:0 ... sim:" + std::to_string(simulated_device_count - 1) + ", host";
    return out;
  }

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

  static Device checked(DeviceKind kind, int index, const std::string& spelled) {
    if (kind == DeviceKind::sim) {
      if (index < 0 || index >= simulated_device_count) {
        throw DeviceError("no simulated device " + quote_input(spelled) + "; available: " + available_list());
      }
    } else if (kind == DeviceKind::cuda) {
      const int n = cuda_device_count();
      if (index < 0 || index >= n) {
        throw DeviceError("no CUDA device " + quote_input(spelled) + " (" +
                          (n == 0 ? cuda_unavailable_reason() : std::to_string(n) + " visible") +
                          "); available: " + available_list());
      }
    }
    return Device(kind, index);
  }

  DeviceKind kind_ = DeviceKind::sim;
  int index_ = 0;
};

GPUMEMPROF_NAMESPACE_END
