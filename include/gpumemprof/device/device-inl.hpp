// Layer 1: the bodies of Device's parsing and checks, which ask the CUDA runtime how many
// devices there are. Included by device.hpp in header-only mode; compiled once in the library
// (lib/device.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on its own.
#pragma once

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/cuda.hpp"
#include "gpumemprof/device/device.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

GPUMEMPROF_FUNC Device Device::current() {
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

GPUMEMPROF_FUNC Device Device::parse(std::string_view spec) {
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

GPUMEMPROF_FUNC std::string Device::available_list() {
  std::string out;
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) out += "cuda:" + std::to_string(i) + ", ";
  out += "sim:0 ... sim:" + std::to_string(simulated_device_count - 1) + ", host";
  return out;
}

GPUMEMPROF_FUNC Device Device::checked(DeviceKind kind, int index, const std::string& spelled) {
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

GPUMEMPROF_NAMESPACE_END
