// Reading allocation traces (../shared/traces/README.md): gzip or plain text, one event a line:
//   # comment / header
//   a <id> <bytes> <stream>     allocate block <id> of <bytes> on <stream>
//   f <id>                      free block <id>
// Malformed input is a FormatError naming the file and line.
#pragma once

#include <zlib.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/error.hpp"

namespace gpumemprof::tools {

struct TraceOp {
  std::uint64_t bytes = 0;   // alloc: requested bytes
  std::uint64_t stream = 0;  // alloc: raw stream value
  std::uint32_t id = 0;
  bool is_alloc = false;
};

struct Trace {
  std::string path;
  std::string header;  // the first comment line, without '#'
  std::vector<TraceOp> ops;
  std::uint32_t id_count = 0;  // ids are < id_count
  std::size_t allocs = 0;
  std::size_t frees = 0;
  std::uint64_t peak_requested_bytes = 0;  // the most requested bytes live at once
};

/// The whole (decompressed) content of a gzip or plain file.
inline std::string read_gzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw IoError("cannot open trace " + path + ": no such file or not readable");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      const std::string why = gzerror(f, &err);
      gzclose(f);
      throw FormatError(path + ": not a readable gzip or text file (" + why + ")");
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  gzclose(f);
  return out;
}

namespace detail {
inline bool next_field(std::string_view& line, std::string_view& field) {
  std::size_t i = 0;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  std::size_t j = i;
  while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
  field = line.substr(i, j - i);
  line.remove_prefix(j);
  return !field.empty();
}
inline bool to_u64(std::string_view s, std::uint64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}
}  // namespace detail

/// Parses a trace from text; checks that every free names a live allocation.
inline Trace parse_trace(std::string_view text, const std::string& path) {
  Trace t;
  t.path = path;
  std::vector<std::uint64_t> live_bytes;  // by id; UINT64_MAX = not live
  std::vector<bool> seen;
  std::uint64_t live = 0;
  std::size_t line_no = 0;
  auto fail = [&](const std::string& why) { throw FormatError(path + ":" + std::to_string(line_no) + ": " + why); };
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (t.header.empty()) t.header = std::string(line.substr(1));
      continue;
    }
    std::string_view kind, id_s, bytes_s, stream_s, extra;
    detail::next_field(line, kind);
    std::uint64_t id = 0;
    if (!detail::next_field(line, id_s) || !detail::to_u64(id_s, id) || id >= 0xFFFFFFFFull) {
      fail("expected 'a <id> <bytes> <stream>' or 'f <id>', got '" + std::string(kind) + " " + std::string(id_s) +
           "...'");
    }
    if (id >= live_bytes.size()) {
      live_bytes.resize(id + 1, UINT64_MAX);
      seen.resize(id + 1, false);
    }
    TraceOp op;
    op.id = static_cast<std::uint32_t>(id);
    if (kind == "a") {
      std::uint64_t bytes = 0, stream = 0;
      if (!detail::next_field(line, bytes_s) || !detail::to_u64(bytes_s, bytes) ||
          !detail::next_field(line, stream_s) || !detail::to_u64(stream_s, stream) || detail::next_field(line, extra)) {
        fail("expected 'a <id> <bytes> <stream>' with decimal numbers");
      }
      if (seen[id]) fail("block id " + std::to_string(id) + " is allocated twice");
      seen[id] = true;
      op.is_alloc = true;
      op.bytes = bytes;
      op.stream = stream;
      live_bytes[id] = bytes;
      live += bytes;
      if (live > t.peak_requested_bytes) t.peak_requested_bytes = live;
      ++t.allocs;
    } else if (kind == "f") {
      if (detail::next_field(line, extra)) fail("expected 'f <id>' and nothing after it");
      if (live_bytes[id] == UINT64_MAX) fail("free of block id " + std::to_string(id) + ", which is not live");
      live -= live_bytes[id];
      live_bytes[id] = UINT64_MAX;
      ++t.frees;
    } else {
      fail("unknown event '" + std::string(kind) + "': lines start with 'a', 'f' or '#'");
    }
    t.ops.push_back(op);
  }
  t.id_count = static_cast<std::uint32_t>(live_bytes.size());
  return t;
}

inline Trace load_trace(const std::string& path) { return parse_trace(read_gzip_file(path), path); }

}  // namespace gpumemprof::tools
