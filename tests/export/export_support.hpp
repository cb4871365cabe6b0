// Shared helpers of the export tests: paths, temporary directories, running python3, a
// synthetic snapshot that sets every field, and a field-by-field comparison.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/snapshot.hpp"

namespace gmp = gpumemprof;

namespace export_test {

/// The repository root: GPUMEMPROF_SOURCE_DIR (set by meson test), else the working directory.
inline std::string source_dir() {
  const char* dir = std::getenv("GPUMEMPROF_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

/// The repository's checker of PyTorch's snapshot schema and the viewer's invariants.
inline std::string check_snapshot_script() { return source_dir() + "/tools/check_snapshot.py"; }

/// The snapshot PyTorch 2.11 wrote (tests/data).
inline std::string reference_pickle() { return source_dir() + "/tests/data/resnet50_train.snapshot.pickle"; }

/// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  /// Under `base`, else $TMPDIR, else /tmp.
  explicit TempDir(std::string base = {}) {
    const char* tmp = std::getenv("TMPDIR");
    if (base.empty()) base = tmp != nullptr ? tmp : "/tmp";
    std::string pattern = base + "/gmp-export-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the entries in the directory.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  std::string path_;
};

/// The bytes of a string literal, embedded NULs included.
template <std::size_t N>
std::string bin(const char (&s)[N]) {
  return std::string(s, N - 1);
}

/// A snapshot as the pickle bytes write_snapshot writes.
inline std::string pickle_bytes(const gmp::Snapshot& s) {
  std::ostringstream os;
  gmp::write_snapshot(s, os, gmp::SnapshotFormat::pickle);
  return os.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// True when a python3 interpreter runs.
inline bool have_python() {
  static const bool ok = std::system("python3 -c 'import pickle, json' >/dev/null 2>&1") == 0;
  return ok;
}

/// Runs python3 on `code` with `args`; returns the exit status, stdout+stderr in *output.
inline int run_python(const std::string& code, const std::vector<std::string>& args, std::string* output = nullptr) {
  TempDir dir;
  write_bytes(dir.file("script.py"), code);
  std::string cmd = "python3 '" + dir.file("script.py") + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " > '" + dir.file("out.txt") + "' 2>&1";
  const int status = std::system(cmd.c_str());
  if (output != nullptr) *output = read_bytes(dir.file("out.txt"));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline gmp::Frames make_frames(std::vector<gmp::Frame> frames) {
  return std::make_shared<const std::vector<gmp::Frame>>(std::move(frames));
}

/// A snapshot that sets every field: two devices, all block states, every trace action
/// (oom included), shared and unshared frames, odd characters, every kind of setting.
inline gmp::Snapshot make_full_snapshot() {
  using gmp::BlockState;
  using gmp::TraceAction;
  const gmp::Frames a = make_frames({{"/src/train.cpp", 42, "train_step(Model&)"},
                                     {"/src/q\"uote\\back.cpp", 7, "h\xC3\xA9llo \xE2\x98\x83 \xF0\x9F\x98\x80"},
                                     {"main.cpp", 1, "main"}});
  const gmp::Frames b = make_frames({{"/src/alloc.cpp", 900, "alloc_tensor"}});
  const std::uint64_t base = 0x7f1234000000ULL;

  gmp::Snapshot s;
  gmp::SnapshotSegment large;
  large.device = 0;
  large.address = base;
  large.stream = 0;
  large.is_large = true;
  large.frames = a;
  large.blocks = {{base, 2 << 20, (2 << 20) - 3, BlockState::active_allocated, a},
                  {base + (2 << 20), 1 << 20, 1000, BlockState::active_pending_free, b},
                  {base + (3 << 20), 17 << 20, 0, BlockState::inactive, nullptr}};
  large.total_size = 20 << 20;
  large.allocated_size = 2 << 20;
  large.active_size = 3 << 20;
  large.requested_size = (2 << 20) - 3 + 1000;
  s.segments.push_back(large);

  gmp::SnapshotSegment small;
  small.device = 1;
  small.address = base + (64 << 20);
  small.stream = 94'000'000'000'000ULL;  // a cudaStream_t's value
  small.is_large = false;
  small.is_expandable = true;
  small.blocks = {{small.address, 2 << 20, 0, BlockState::inactive, nullptr}};
  small.total_size = 2 << 20;
  s.segments.push_back(small);

  std::int64_t t = 1'795'303'894'267'574;
  std::vector<gmp::TraceEntry> d0;
  const auto entry = [&](TraceAction act, std::uint64_t addr, std::uint64_t size, const gmp::Frames& f) {
    gmp::TraceEntry e;
    e.action = act;
    e.addr = addr;
    e.size = size;
    e.stream = 0;
    e.time_us = t++;
    e.frames = f;
    return e;
  };
  d0.push_back(entry(TraceAction::segment_alloc, base, 20 << 20, a));
  d0.push_back(entry(TraceAction::alloc, base, (2 << 20) - 3, a));
  d0.push_back(entry(TraceAction::alloc, base + (2 << 20), 1000, b));
  d0.push_back(entry(TraceAction::free_requested, base + (2 << 20), 1000, b));
  d0.push_back(entry(TraceAction::segment_map, base + (40 << 20), 2 << 20, nullptr));
  d0.push_back(entry(TraceAction::segment_unmap, base + (40 << 20), 2 << 20, nullptr));
  d0.push_back(entry(TraceAction::alloc, base + (3 << 20), 512, a));
  d0.push_back(entry(TraceAction::free_requested, base + (3 << 20), 512, a));
  d0.push_back(entry(TraceAction::free_completed, base + (3 << 20), 512, a));
  d0.push_back(entry(TraceAction::snapshot, 0, 0, nullptr));
  d0.push_back(entry(TraceAction::oom, 123456789, 1ULL << 40, b));  // addr = device free bytes
  d0[1].compile_context = "compiled_autograd";
  d0[1].user_metadata = "step=1 \"quoted\"\n";
  d0[2].stream = 94'000'000'000'000ULL;
  std::vector<gmp::TraceEntry> d1;
  d1.push_back(entry(TraceAction::segment_alloc, small.address, 2 << 20, nullptr));
  d1.push_back(entry(TraceAction::segment_free, base + (80 << 20), 2 << 20, nullptr));
  s.device_traces = {d0, d1, {}};

  s.allocator_settings = {
      {"PYTORCH_CUDA_ALLOC_CONF", std::string("expandable_segments:True")},
      {"max_split_size", std::int64_t{-1}},
      {"garbage_collection_threshold", 0.5},
      {"expandable_segments", true},
      {"zero_threshold", 0.0},
      {"roundup_power2_divisions", std::vector<std::pair<std::string, std::int64_t>>{{"1", 0}, {"2", 4}}}};
  s.external_annotations = {{"train_step", true, 0, t}, {"train_step", false, 0, t + 5}, {"eval", true, 1, t + 6}};
  return s;
}

inline bool same_frames(const gmp::Frames& x, const gmp::Frames& y) {
  const bool ex = !x || x->empty();
  const bool ey = !y || y->empty();
  if (ex || ey) return ex == ey;
  return *x == *y;
}

/// Every field of a equals the same field of b (frames by content; null = empty).
inline void require_same(const gmp::Snapshot& a, const gmp::Snapshot& b) {
  REQUIRE(a.segments.size() == b.segments.size());
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    INFO("segment " << i);
    const auto& x = a.segments[i];
    const auto& y = b.segments[i];
    CHECK(x.device == y.device);
    CHECK(x.address == y.address);
    CHECK(x.total_size == y.total_size);
    CHECK(x.allocated_size == y.allocated_size);
    CHECK(x.active_size == y.active_size);
    CHECK(x.requested_size == y.requested_size);
    CHECK(x.stream == y.stream);
    CHECK(x.is_large == y.is_large);
    CHECK(x.is_expandable == y.is_expandable);
    CHECK(same_frames(x.frames, y.frames));
    REQUIRE(x.blocks.size() == y.blocks.size());
    for (std::size_t j = 0; j < x.blocks.size(); ++j) {
      INFO("block " << j);
      CHECK(x.blocks[j].address == y.blocks[j].address);
      CHECK(x.blocks[j].size == y.blocks[j].size);
      CHECK(x.blocks[j].requested_size == y.blocks[j].requested_size);
      CHECK(x.blocks[j].state == y.blocks[j].state);
      CHECK(same_frames(x.blocks[j].frames, y.blocks[j].frames));
    }
  }
  REQUIRE(a.device_traces.size() == b.device_traces.size());
  for (std::size_t d = 0; d < a.device_traces.size(); ++d) {
    REQUIRE(a.device_traces[d].size() == b.device_traces[d].size());
    for (std::size_t k = 0; k < a.device_traces[d].size(); ++k) {
      INFO("device_traces[" << d << "][" << k << "]");
      const auto& x = a.device_traces[d][k];
      const auto& y = b.device_traces[d][k];
      CHECK(x.action == y.action);
      CHECK(x.addr == y.addr);
      CHECK(x.size == y.size);
      CHECK(x.stream == y.stream);
      CHECK(x.time_us == y.time_us);
      CHECK(x.compile_context == y.compile_context);
      CHECK(x.user_metadata == y.user_metadata);
      CHECK(same_frames(x.frames, y.frames));
    }
  }
  CHECK(a.allocator_settings == b.allocator_settings);
  REQUIRE(a.external_annotations.size() == b.external_annotations.size());
  for (std::size_t i = 0; i < a.external_annotations.size(); ++i) {
    CHECK(a.external_annotations[i].name == b.external_annotations[i].name);
    CHECK(a.external_annotations[i].start == b.external_annotations[i].start);
    CHECK(a.external_annotations[i].device == b.external_annotations[i].device);
    CHECK(a.external_annotations[i].time_us == b.external_annotations[i].time_us);
  }
}

}  // namespace export_test
