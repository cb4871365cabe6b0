// Reading allocation traces (docs/pytorch-compat.md, "Allocation traces"): gzip or plain text, one event a line:
//   # comment / header
//   a <id> <bytes> <stream>     allocate block <id> of <bytes> on <stream>
//   f <id>                      free block <id>
// Malformed input is a FormatError naming the file and line; a truncated or corrupt gzip file
// one naming the byte offset; a trace with no events is refused too. Block ids may be any
// 64-bit numbers: they are mapped to dense indices, so memory follows the ids actually used.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/error.hpp"

namespace gpumemprof::tools {

struct TraceOp {
  std::uint64_t bytes = 0;   // alloc: requested bytes
  std::uint64_t stream = 0;  // alloc: raw stream value
  std::uint32_t id = 0;
  // The op's line in the file (replayed snapshots name it in their frames); 0 past 2^31 - 1.
  // A bit field beside is_alloc, so an op stays 24 bytes.
  std::uint32_t line : 31 = 0;
  std::uint32_t is_alloc : 1 = 0;
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

namespace detail {
/// Inflates gzip members back to back (what gzip and zcat accept). A truncated or corrupt
/// stream is a FormatError naming `path` and the byte offset in the compressed file where it
/// goes wrong: a partial trace must never replay as if it were whole.
inline std::string gunzip(std::string_view in, const std::string& path) {
  std::string out;
  std::size_t member = 0;  // offset of the current member in `in`
  char buf[1 << 16];
  while (member < in.size()) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw FormatError(path + ": zlib could not start");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + member));
    z.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size() - member, 1u << 30));
    int rc = Z_OK;
    while (rc == Z_OK) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      rc = inflate(&z, Z_NO_FLUSH);
      out.append(buf, sizeof buf - z.avail_out);
      if (rc == Z_BUF_ERROR && z.avail_in == 0 && member + z.total_in < in.size()) {
        // The 1 GiB window is used up: feed the next piece.
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + member + z.total_in));
        z.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size() - member - z.total_in, 1u << 30));
        rc = Z_OK;
      }
    }
    const std::size_t at = member + z.total_in;
    const std::string why = z.msg != nullptr ? z.msg : "";
    inflateEnd(&z);
    if (rc == Z_BUF_ERROR) {
      throw FormatError(path + ": truncated gzip data: the stream ends at byte " + std::to_string(at) +
                        " before its end marker (an interrupted download or copy?)");
    }
    if (rc != Z_STREAM_END) {
      throw FormatError(path + ": corrupt gzip data at byte " + std::to_string(at) +
                        (why.empty() ? "" : " (" + why + ")"));
    }
    member = at;
    // Another member may follow; anything else after the last one is an error, not ignored.
    if (member < in.size() && (in.size() - member < 2 || static_cast<unsigned char>(in[member]) != 0x1f ||
                               static_cast<unsigned char>(in[member + 1]) != 0x8b)) {
      throw FormatError(path + ": unexpected data after the gzip stream at byte " + std::to_string(member));
    }
  }
  return out;
}
}  // namespace detail

/// The decompressed content of trace bytes: gzip (recognised by its magic bytes) or plain text.
inline std::string decompress_trace(std::string_view bytes, const std::string& path) {
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    return detail::gunzip(bytes, path);
  }
  return std::string(bytes);
}

/// The whole (decompressed) content of a gzip or plain file.
/// A missing or unreadable file is an IoError with the system's reason.
inline std::string read_gzip_file(const std::string& path) { return decompress_trace(read_file(path), path); }

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

/// Parses a trace from text; checks that every free names a live allocation. Op ids are dense
/// indices (0, 1, ... in order of first appearance), not the file's ids.
inline Trace parse_trace(std::string_view text, const std::string& path) {
  // A request past 2^60 bytes cannot be real and would overflow the live-bytes sum.
  constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 60;
  constexpr std::size_t kMaxLine = (std::size_t{1} << 31) - 1;
  Trace t;
  t.path = path;
  std::unordered_map<std::uint64_t, std::uint32_t> index;  // file id -> dense id
  std::vector<std::uint64_t> live_bytes;                   // by dense id; UINT64_MAX = not live
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
    const std::string_view whole = line;
    std::string_view kind, id_s, bytes_s, stream_s, extra;
    detail::next_field(line, kind);
    std::uint64_t id = 0;
    if ((kind != "a" && kind != "f") || !detail::next_field(line, id_s) || !detail::to_u64(id_s, id)) {
      fail("expected 'a <id> <bytes> <stream>' or 'f <id>' with decimal numbers, got " + quote_input(whole) +
           " (is this an allocation trace?)");
    }
    TraceOp op;
    op.line = line_no <= kMaxLine ? static_cast<std::uint32_t>(line_no) : 0;
    if (kind == "a") {
      std::uint64_t bytes = 0, stream = 0;
      if (!detail::next_field(line, bytes_s) || !detail::to_u64(bytes_s, bytes) ||
          !detail::next_field(line, stream_s) || !detail::to_u64(stream_s, stream) || detail::next_field(line, extra)) {
        fail("expected 'a <id> <bytes> <stream>' with decimal numbers, got " + quote_input(whole));
      }
      if (bytes > kMaxBytes) fail("an allocation of " + std::to_string(bytes) + " bytes (more than 2^60)");
      const auto [it, fresh] = index.try_emplace(id, static_cast<std::uint32_t>(live_bytes.size()));
      if (!fresh) fail("block id " + std::to_string(id) + " is allocated twice");
      if (live_bytes.size() == UINT32_MAX) fail("more than 2^32 - 1 allocations");
      live_bytes.push_back(bytes);
      op.id = it->second;
      op.is_alloc = true;
      op.bytes = bytes;
      op.stream = stream;
      live += bytes;
      if (live > t.peak_requested_bytes) t.peak_requested_bytes = live;
      ++t.allocs;
    } else {
      if (detail::next_field(line, extra)) fail("expected 'f <id>' and nothing after it, got " + quote_input(whole));
      const auto it = index.find(id);
      if (it == index.end() || live_bytes[it->second] == UINT64_MAX) {
        fail("free of block id " + std::to_string(id) + ", which is not live");
      }
      op.id = it->second;
      live -= live_bytes[op.id];
      live_bytes[op.id] = UINT64_MAX;
      ++t.frees;
    }
    t.ops.push_back(op);
  }
  if (t.ops.empty()) {
    throw FormatError(path + ": an empty trace: no 'a'/'f' events" +
                      (line_no == 0 ? " (the file is empty)" : " (only comments and blank lines)"));
  }
  t.id_count = static_cast<std::uint32_t>(live_bytes.size());
  return t;
}

inline Trace load_trace(const std::string& path) { return parse_trace(read_gzip_file(path), path); }

}  // namespace gpumemprof::tools
