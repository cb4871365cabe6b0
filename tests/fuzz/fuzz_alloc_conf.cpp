// libFuzzer target: the ALLOC_CONF parser. Any input either parses or is a ConfigError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpumemprof/allocator/allocator_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = gpumemprof::AllocatorConfig::parse(text);
    // A parsed config answers its queries for any size.
    for (std::size_t s = 1; s != 0; s <<= 7) (void)config.divisions_for(s);
  } catch (const gpumemprof::ConfigError&) {
  }
  return 0;
}
