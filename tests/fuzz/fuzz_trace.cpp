// libFuzzer target: the trace reader, plain text and gzip (gzip when the input starts with its
// magic bytes). Any input is a trace or a FormatError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto t = gpumemprof::tools::parse_trace(gpumemprof::tools::decompress_trace(bytes, "fuzz"), "fuzz");
    // Every op's dense id is below id_count, so replay can index by it.
    for (const auto& op : t.ops) {
      if (op.id >= t.id_count) __builtin_trap();
    }
  } catch (const gpumemprof::FormatError&) {
  }
  return 0;
}
