// libFuzzer target: Device parsing ("cuda:N", "sim:N", "host", numbers). Any input is a device
// or a DeviceError (std::invalid_argument).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "gpumemprof/device/device.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const gpumemprof::Device d(text);
    // What a device prints parses back to the same device.
    if (gpumemprof::Device(d.str()) != d) __builtin_trap();
  } catch (const gpumemprof::DeviceError&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
