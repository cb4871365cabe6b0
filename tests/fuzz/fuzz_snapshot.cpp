// libFuzzer target: a snapshot reader -- the pickle reader (GMP_FUZZ_JSON=0) or the JSON reader
// (GMP_FUZZ_JSON=1) -- and the snapshot decoder on top of it, both as a value tree and with the
// trace entries streamed (parse_compact_snapshot). Any input is a snapshot or a FormatError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpumemprof/export/formats/snapshot_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
#if GMP_FUZZ_JSON
    const gpumemprof::DataValue v = gpumemprof::parse_json(bytes);
#else
    const gpumemprof::DataValue v = gpumemprof::read_pickle(bytes);
#endif
    (void)gpumemprof::snapshot_from_value(v, "fuzz");
  } catch (const gpumemprof::FormatError&) {
  }
  try {
    (void)gpumemprof::parse_compact_snapshot(bytes, "fuzz");
  } catch (const gpumemprof::FormatError&) {
  }
  return 0;
}
