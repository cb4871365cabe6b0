// libFuzzer target: the JSON reader and the snapshot decoder on top of it. Any input is a
// snapshot or a FormatError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpumemprof/export/snapshot_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const gpumemprof::DataValue v = gpumemprof::parse_json(bytes);
    (void)gpumemprof::snapshot_from_value(v, "fuzz");
  } catch (const gpumemprof::FormatError&) {
  }
  return 0;
}
