// Layer 2: the parser of the allocator's options (allocator_config.hpp). Included by
// allocator_config.hpp in header-only mode; compiled once in the library
// (lib/allocator_config.cpp) for GPUMEMPROF_COMPILED_LIB programs. Not a header to include on
// its own.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpumemprof/allocator/allocator_config.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class AllocatorConfig::Tokens {
 public:
  explicit Tokens(std::string_view s) {
    std::string buf;
    for (char ch : s) {
      if (ch == ',' || ch == ':' || ch == '[' || ch == ']') {
        if (!buf.empty()) tok_.push_back(std::move(buf));
        buf.clear();
        tok_.emplace_back(1, ch);
      } else if (std::isspace(static_cast<unsigned char>(ch)) == 0) {
        buf += ch;
      }
    }
    if (!buf.empty()) tok_.push_back(std::move(buf));
  }
  [[nodiscard]] std::size_t size() const { return tok_.size(); }
  [[nodiscard]] const std::string& at(std::size_t i, std::string_view wanted) const {
    if (i >= tok_.size()) {
      throw ConfigError("allocator config ended early: expected " + std::string(wanted));
    }
    return tok_[i];
  }
  void expect(std::size_t i, std::string_view tok, const std::string& key) const {
    if (at(i, "'" + std::string(tok) + "' after " + key) != tok) {
      fail(key, "expected '" + std::string(tok) + "' but found " + quote_input(tok_[i]));
    }
  }
  [[noreturn]] static void fail(const std::string& key, const std::string& why) {
    throw ConfigError("allocator config key " + quote_input(key) + ": " + why);
  }
  [[nodiscard]] std::size_t unsigned_int(std::size_t i, const std::string& key) const {
    const std::string& v = at(i, "a value for " + key);
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19) {
      fail(key, "expected a non-negative integer, got " + quote_input(v));
    }
    return std::stoull(v);
  }
  [[nodiscard]] std::size_t megabytes(std::size_t i, const std::string& key) const {
    std::size_t mb = unsigned_int(i, key);
    if (mb < kLargeBuffer >> 20) fail(key, "too small, must be >= " + std::to_string(kLargeBuffer >> 20));
    if (mb > unlimited >> 20) mb = unlimited >> 20;
    return mb << 20;
  }
  [[nodiscard]] double number(std::size_t i, const std::string& key) const {
    const std::string& v = at(i, "a value for " + key);
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size()) fail(key, "expected a number, got " + quote_input(v));
    return d;
  }
  [[nodiscard]] bool boolean(std::size_t i, const std::string& key) const {
    const std::string& v = at(i, "True or False for " + key);
    if (v == "True") return true;
    if (v == "False") return false;
    fail(key, "expected 'True' or 'False', got " + quote_input(v));
  }

 private:
  std::vector<std::string> tok_;
};

GPUMEMPROF_FUNC AllocatorConfig AllocatorConfig::from_env() {
  const char* env = std::getenv("GPUMEMPROF_ALLOC_CONF");
  if (env == nullptr) return {};
  try {
    return parse(env);
  } catch (const ConfigError& e) {
    throw ConfigError(environment_error("GPUMEMPROF_ALLOC_CONF", env, e.what()));
  }
}

GPUMEMPROF_FUNC AllocatorConfig AllocatorConfig::parse(std::string_view conf) {
  AllocatorConfig c;
  c.source = std::string(conf);
  Tokens t(conf);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string key = t.at(i, "a key");
    t.expect(++i, ":", key);
    ++i;
    if (key == "max_split_size_mb") {
      c.max_split_size = t.megabytes(i, key);
    } else if (key == "max_non_split_rounding_mb") {
      c.max_non_split_rounding_size = t.megabytes(i, key);
    } else if (key == "garbage_collection_threshold") {
      const double v = t.number(i, key);
      if (!(v > 0.0 && v < 1.0)) t.fail(key, "must be in (0.0, 1.0), got " + t.at(i, key));
      c.garbage_collection_threshold = v;
    } else if (key == "roundup_power2_divisions") {
      i = c.parse_roundup(t, i);
    } else if (key == "expandable_segments") {
      c.expandable_segments = t.boolean(i, key);
    } else if (key == "compacting_expandable_segments") {  // gpumemprof's own option
      c.compacting_expandable_segments = t.boolean(i, key);
    } else if (key == "release_lock_on_cudamalloc" || key == "release_lock_on_hipmalloc") {
      c.release_lock_on_cudamalloc = t.boolean(i, key);  // PyTorch accepts the ROCm spelling too
    } else if (key == "per_process_memory_fraction") {
      const double v = t.number(i, key);
      if (!(v >= 0.0 && v <= 1.0)) t.fail(key, "must be in [0.0, 1.0], got " + t.at(i, key));
      c.per_process_memory_fraction = v;
    } else if (key == "backend") {
      if (t.at(i, key) != "native") {
        t.fail(key, "gpumemprof is the native caching allocator; only backend:native is accepted");
      }
    } else if (key == "pinned_use_cuda_host_register" || key == "pinned_use_hip_host_register" ||
               key == "pinned_use_background_threads") {
      (void)t.boolean(i, key);
      c.ignore(key, kPinnedReason);
    } else if (key == "pinned_num_register_threads") {
      const std::size_t v = t.unsigned_int(i, key);
      if (!is_pow2(v)) t.fail(key, "the number of register threads must be a power of 2, got " + std::to_string(v));
      if (v > kPinnedMaxRegisterThreads) {
        t.fail(key, "the number of register threads must be <= " + std::to_string(kPinnedMaxRegisterThreads) +
                        ", got " + std::to_string(v));
      }
      c.ignore(key, kPinnedReason);
    } else if (key == "pinned_reserve_segment_size_mb") {
      if (t.unsigned_int(i, key) == 0) t.fail(key, "must be greater than 0");
      c.ignore(key, kPinnedReason);
    } else if (key == "graph_capture_record_stream_reuse") {
      if (t.boolean(i, key)) {
        c.ignore(key,
                 "gpumemprof does not hand out, during a CUDA graph capture, blocks freed while other streams "
                 "still use them (PyTorch's behaviour with False); they wait until the capture ends");
      }
    } else {
      t.fail(key,
             "is not an allocator option; known: max_split_size_mb, max_non_split_rounding_mb, "
             "garbage_collection_threshold, roundup_power2_divisions, expandable_segments, "
             "release_lock_on_cudamalloc, per_process_memory_fraction, backend, PyTorch's pinned_* and "
             "graph_capture_record_stream_reuse (accepted, ignored), and compacting_expandable_segments "
             "(gpumemprof-only)");
    }
    if (i + 1 < t.size()) t.expect(++i, ",", key);
  }
  return c;
}

GPUMEMPROF_FUNC void AllocatorConfig::ignore(const std::string& key, std::string_view why) {
  ignored.push_back("allocator config key '" + key +
                    "': accepted as PyTorch reads it, ignored by gpumemprof: " + std::string(why));
}

GPUMEMPROF_FUNC std::size_t AllocatorConfig::parse_roundup(const Tokens& t, std::size_t i) {
  const std::string key = "roundup_power2_divisions";
  auto& div = roundup_power2_divisions;
  div.fill(0);
  if (t.at(i, "a value for " + key) != "[") {
    const std::size_t v = t.unsigned_int(i, key);
    if (!is_pow2(v)) t.fail(key, "divisions must be a power of 2, got " + std::to_string(v));
    div.fill(v);
    return i;
  }
  std::size_t last_index = 0;
  bool first = true;
  while (++i < t.size() && t.at(i, "]") != "]") {
    const std::string bound = t.at(i, "a boundary");
    t.expect(++i, ":", key);
    const std::size_t v = t.unsigned_int(++i, key);
    if (v != 0 && !is_pow2(v)) {
      t.fail(key, "divisions must be a power of 2 or 0, got " + std::to_string(v));
    }
    if (bound == ">") {
      for (std::size_t k = last_index + 1; k < div.size(); ++k) div[k] = v;
    } else {
      const std::size_t b = t.unsigned_int(i - 2, key);
      if (!is_pow2(b)) t.fail(key, "interval boundaries must be powers of 2 (MiB), got " + bound);
      std::size_t index = 63 - static_cast<std::size_t>(__builtin_clzll(b));
      if (index > div.size() - 1) index = div.size() - 1;
      if (first) {
        for (std::size_t k = 0; k < index; ++k) div[k] = v;
        first = false;
      }
      div[index] = v;
      last_index = index;
    }
    if (i + 1 < t.size() && t.at(i + 1, "]") != "]") t.expect(++i, ",", key);
  }
  if (i >= t.size()) t.fail(key, "missing the closing ']'");
  return i;
}

GPUMEMPROF_NAMESPACE_END
