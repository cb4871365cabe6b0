// Test helper: PyTorch's own figures for every trace in tests/data, as its allocator gave them
// replaying each one on an H200 (tests/data/pytorch_replay_figures.json; README.md there says
// how it was recorded), and one replay's figures in the same terms.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "replay.hpp"

namespace pytorch_figures {

inline std::string data_path(const std::string& name) {
  const char* src = std::getenv("GPUMEMPROF_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/tests/data/" + name;
}

inline const gpumemprof::DataValue& figures() {
  static const gpumemprof::DataValue v = [] {
    std::ifstream in(data_path("pytorch_replay_figures.json"));
    std::stringstream text;
    text << in.rdbuf();
    return gpumemprof::parse_json(text.str());
  }();
  return v;
}

inline const char* const kTraces[] = {"resnet50_train",      "gpt2_train",  "gpt2_generate",
                                      "two_stream_resnet18", "bert_varlen", "gpt2_varlen"};

// One replay's figures, as the recording took them: peaks reset before it, device calls during it.
struct Figures {
  std::int64_t peak_allocated = 0, peak_reserved = 0, maps = 0, unmaps = 0;
  bool operator==(const Figures&) const = default;
};
inline std::ostream& operator<<(std::ostream& o, const Figures& f) {
  return o << "{peak allocated " << f.peak_allocated << ", peak reserved " << f.peak_reserved << ", device allocs "
           << f.maps << ", frees " << f.unmaps << "}";
}
inline Figures recorded(const gpumemprof::DataValue& r) {
  return {r.find("peak_allocated_bytes")->as_int(), r.find("peak_reserved_bytes")->as_int(),
          r.find("num_device_alloc")->as_int(), r.find("num_device_free")->as_int()};
}

// Replays `t` on `a` cold, then warm as often as the recording did (blocks live at a replay's end
// freed after it, peaks reset between replays), and checks each replay's figures against `want`'s
// (one policy's entry of a trace).
template <class Allocator>
void check_replays(const gpumemprof::tools::Trace& t, Allocator& a, const gpumemprof::DataValue& want) {
  const auto& warm = want.find("warm")->items();
  for (std::size_t i = 0; i <= warm.size(); ++i) {
    const auto before = a.memory_stats();
    std::vector<void*> live;
    const auto r = gpumemprof::tools::replay(t, a, &live);
    const Figures got{r.peak_allocated_bytes, r.peak_reserved_bytes, r.stats.num_device_alloc - before.num_device_alloc,
                      r.stats.num_device_free - before.num_device_free};
    for (void* p : live) a.deallocate(p);
    a.validate();
    a.reset_peak_memory_stats();
    INFO("replay " << i << (i == 0 ? " (cold)" : " (warm)"));
    CHECK(got == recorded(i == 0 ? *want.find("cold") : warm[i - 1]));
  }
}

}  // namespace pytorch_figures
