// The one reading of a trace (analysis/timeline.hpp): levels per entry with PyTorch's semantics,
// the levels before a late-starting trace, categories, and every report drawing the same curve.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/analysis/category_rules.hpp"
#include "gpumemprof/analysis/memory_diff.hpp"
#include "gpumemprof/analysis/timeline.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/reports/html_report_model.hpp"
#include "gpumemprof/export/reports/perfetto.hpp"
#include "history/history_util.hpp"

using gmp::TimelineLevels;
using gmp::TraceAction;

namespace {

gmp::TraceEntry entry(TraceAction a, std::uint64_t addr, std::uint64_t size, std::int64_t t, std::string md = {}) {
  gmp::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.time_us = 1000 + t;
  e.user_metadata = std::move(md);
  return e;
}

std::vector<TimelineLevels> levels_of(const gmp::TraceTimeline<gmp::Snapshot>& t) {
  std::vector<TimelineLevels> out;
  t.walk([&out](std::size_t, const auto&, const TimelineLevels& l, const auto&) { out.push_back(l); });
  return out;
}

}  // namespace

TEST_CASE("timeline: allocated drops at free_requested, active at free_completed") {
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::segment_alloc, 0x1000, 2 << 20, 0), entry(TraceAction::alloc, 0x1000, 700, 1),
                      entry(TraceAction::free_requested, 0x1000, 700, 2),
                      entry(TraceAction::free_completed, 0x1000, 700, 3),
                      entry(TraceAction::segment_free, 0x1000, 2 << 20, 4)}};
  const gmp::TraceTimeline<gmp::Snapshot> t(s, 0);
  CHECK(t.start() == TimelineLevels{0, 0, 0});
  const std::vector<TimelineLevels> want = {
      {0, 0, 2 << 20}, {700, 700, 2 << 20}, {0, 700, 2 << 20}, {0, 0, 2 << 20}, {0, 0, 0}};
  CHECK(levels_of(t) == want);
  CHECK(t.peaks() == TimelineLevels{700, 700, 2 << 20});
}

TEST_CASE("timeline: a late trace starts from what the segments hold minus its net change") {
  gmp::Snapshot s;
  // Before the trace: 1000 B allocated at 0x1000 (freed in it) and 512 B at 0x1400 (pending free at the end).
  s.device_traces = {{entry(TraceAction::free_requested, 0x1000, 1000, 0, "category=activation"),
                      entry(TraceAction::free_completed, 0x1000, 1000, 1, "category=activation"),
                      entry(TraceAction::alloc, 0x2000, 300, 2, "category=gradient"),
                      entry(TraceAction::free_requested, 0x1400, 512, 3)}};
  s.segments.push_back({0, 0x1000, 4096, 512, 1024, 812, 0, false, false, nullptr,
                        {{0x1000, 1024, 0, gmp::BlockState::inactive, nullptr},
                         {0x1400, 512, 512, gmp::BlockState::active_pending_free, nullptr},
                         {0x1600, 512, 300, gmp::BlockState::active_allocated, nullptr},
                         {0x1800, 2048, 0, gmp::BlockState::inactive, nullptr}}});
  const gmp::TraceTimeline<gmp::Snapshot> t(s, 0);
  CHECK(t.start() == TimelineLevels{1512, 1512, 4096});
  CHECK(t.end() == TimelineLevels{300, 812, 4096});
  // Categories: the free names activation; the rest of the start is unknown.
  std::map<std::string, std::int64_t> start;
  for (std::size_t c = 0; c < t.categories().size(); ++c) start[t.categories()[c]] = t.start_categories()[c];
  CHECK(start == std::map<std::string, std::int64_t>{{"", 512}, {"activation", 1000}, {"gradient", 0}});
  std::vector<std::vector<std::int64_t>> by_category;
  t.walk([&](std::size_t, const auto&, const TimelineLevels&, const std::vector<std::int64_t>& c) { by_category.push_back(c); });
  REQUIRE(by_category.size() == 4);
  CHECK(by_category[0] == std::vector<std::int64_t>{512, 0, 0});
  CHECK(by_category[2] == std::vector<std::int64_t>{512, 0, 300});
  CHECK(by_category[3] == std::vector<std::int64_t>{0, 0, 300});
}

TEST_CASE("timeline: a free takes the bytes out of the category its alloc carried") {
  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x1000, 100, 0, "category=input"),
                      entry(TraceAction::free_requested, 0x1000, 100, 1, "other metadata"),
                      entry(TraceAction::free_completed, 0x1000, 100, 1)}};
  const gmp::TraceTimeline<gmp::Snapshot> t(s, 0);
  std::vector<std::int64_t> last;
  t.walk([&](std::size_t, const auto&, const TimelineLevels&, const std::vector<std::int64_t>& c) { last = c; });
  CHECK(last == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("timeline: Perfetto's, the HTML report's and diff's levels are the timeline's on one snapshot") {
  // A recorded workload with frees pending on another stream, so free_requested and
  // free_completed fall at different moments (where the two reports used to disagree).
  Recorded r;
  auto& a = r.a();
  const gmp::Stream side(5);
  std::vector<void*> live;
  for (int i = 0; i < 40; ++i) {
    live.push_back(a.allocate(static_cast<std::size_t>(1000 + 4096 * i)));
    if (i % 3 == 0) a.record_stream(live.back(), side);
    if (i % 4 == 3) {
      a.deallocate(live.front());
      live.erase(live.begin());
    }
    if (i % 10 == 9) r.sim.sim().complete_all_events();
  }
  a.deallocate(live.back());
  live.pop_back();
  const gmp::Snapshot snap = gmp::snapshot(a);
  const gmp::TraceTimeline<gmp::Snapshot> t(snap, 0);
  const auto& trace = snap.device_traces.at(0);
  REQUIRE(trace.size() > 60);

  // Perfetto: the requested and reserved counters are the timeline's levels (active: requested
  // bytes until free_completed) at each timestamp.
  std::ostringstream os;
  gmp::write_perfetto(snap, os);
  const gmp::DataValue doc = gmp::parse_json(os.str());
  std::map<std::string, std::vector<std::int64_t>> counters;
  for (const gmp::DataValue& e : doc.find("traceEvents")->items()) {
    if (e.find("ph")->as_string() == "C") {
      counters[e.find("name")->as_string()].push_back(e.find("args")->find("bytes")->as_int());
    }
  }
  std::vector<std::int64_t> requested{t.start().requested};
  std::vector<std::int64_t> reserved{t.start().reserved};
  t.walk([&](std::size_t i, const auto& e, const TimelineLevels& l, const auto&) {
    if (i + 1 < trace.size() && trace[i + 1].time_us <= e.time_us) return;  // one sample per timestamp
    if (l.requested != requested.back()) requested.push_back(l.requested);
    if (l.reserved != reserved.back()) reserved.push_back(l.reserved);
  });
  CHECK(counters["requested"] == requested);
  CHECK(counters["reserved"] == reserved);

  // HTML: its active curve (the allocations it draws, state by state), its reserved steps and
  // its peaks are the timeline's.
  const gmp::detail::HtmlModel m = gmp::detail::build_html_model(snap);
  REQUIRE(m.devices.size() == 1);
  const gmp::detail::HtmlDevice& d = m.devices[0];
  std::vector<std::int64_t> html_active(trace.size() + 2, 0);
  for (const auto& al : d.allocations) {
    html_active[al.start] += static_cast<std::int64_t>(al.size);
    html_active[al.end] -= static_cast<std::int64_t>(al.size);
  }
  std::int64_t active = html_active[0];
  CHECK(active == t.start().requested);
  std::int64_t html_reserved = static_cast<std::int64_t>(d.summary.reserved_start_bytes);
  CHECK(html_reserved == t.start().reserved);
  std::size_t change = 0;
  bool same = true;
  t.walk([&](std::size_t i, const auto&, const TimelineLevels& l, const auto&) {
    active += html_active[i + 1];
    while (change < d.reserved_changes.size() && d.reserved_changes[change].first == i + 1) {
      html_reserved += d.reserved_changes[change++].second;
    }
    same = same && active == l.requested && html_reserved == l.reserved;
  });
  CHECK(same);
  const TimelineLevels peaks = t.peaks();
  CHECK(d.summary.peak_requested_in_use_bytes == static_cast<std::uint64_t>(peaks.requested_in_use));
  CHECK(d.summary.peak_requested_bytes == static_cast<std::uint64_t>(peaks.requested));
  CHECK(d.summary.peak_reserved_bytes == static_cast<std::uint64_t>(peaks.reserved));
  CHECK(*std::max_element(counters["requested"].begin(), counters["requested"].end()) == peaks.requested);
  CHECK(*std::max_element(counters["reserved"].begin(), counters["reserved"].end()) == peaks.reserved);
  // diff: its run's peak requested is the same level, its peak allocated the HTML report's.
  const gmp::MemoryUsage usage = gmp::usage_from_snapshot(snap);
  CHECK(usage.total.peak_requested_bytes == static_cast<std::uint64_t>(peaks.requested));
  REQUIRE(usage.total.peak_allocated_bytes.has_value());
  CHECK(usage.total.peak_allocated_bytes == d.summary.peak_allocated_bytes);
  bool pending = false;  // the workload did keep frees pending: the two curves part somewhere
  t.walk([&](std::size_t, const auto&, const TimelineLevels& l, const auto&) { pending |= l.requested_in_use < l.requested; });
  CHECK(pending);

  for (void* p : live) a.deallocate(p);
}

TEST_CASE("category rules: frames and scopes name untagged memory, first rule wins") {
  const gmp::CategoryRules rules = gmp::CategoryRules::parse(
      "# CATEGORY frame|scope PATTERN\n"
      "\n"
      "optimizer_state frame  torch/optim/\n"
      "parameter       frame  Linear::Linear\\(\n"
      "activation      scope  ^forward$\n"
      "temporary       frame  .*\n",
      "my.rules");
  CHECK(rules.size() == 4);
  const auto frames = [](std::vector<gmp::Frame> f) { return std::make_shared<const std::vector<gmp::Frame>>(std::move(f)); };
  const gmp::Frames weight = frames({{"model.py", 10, "Linear::Linear(int, int)"}, {"train.py", 3, "main"}});
  const gmp::Frames adam = frames({{"/site-packages/torch/optim/adam.py", 99, "_init_group"}});
  const gmp::Frames act = frames({{"model.py", 20, "relu"}});

  gmp::Snapshot s;
  s.device_traces = {{entry(TraceAction::alloc, 0x1000, 100, 0), entry(TraceAction::alloc, 0x2000, 200, 10),
                      entry(TraceAction::alloc, 0x3000, 400, 20), entry(TraceAction::alloc, 0x4000, 800, 30),
                      entry(TraceAction::alloc, 0x5000, 1600, 40, "category=input")}};
  auto& tr = s.device_traces[0];
  tr[0].frames = weight;
  tr[1].frames = adam;
  tr[2].frames = act;  // inside "forward": the scope rule comes before the catch-all frame rule
  tr[3].frames = act;  // after "forward": the catch-all
  tr[4].frames = weight;  // carries its own category: rules only fill in
  s.external_annotations = {{"forward", true, 0, 1015}, {"forward", false, 0, 1025}};
  const gmp::TraceTimeline<gmp::Snapshot> t(s, 0, &rules);
  std::map<std::string, std::int64_t> bytes;
  t.walk([&](std::size_t i, const auto&, const TimelineLevels&, const std::vector<std::int64_t>& c) {
    if (i + 1 != tr.size()) return;
    for (std::size_t k = 0; k < c.size(); ++k) bytes[t.categories()[k]] = c[k];
  });
  CHECK(bytes == std::map<std::string, std::int64_t>{
                     {"", 0}, {"parameter", 100}, {"optimizer_state", 200}, {"activation", 400}, {"temporary", 800}, {"input", 1600}});
}

TEST_CASE("category rules: a bad line names its place and what to write") {
  const auto message = [](const std::string& text) {
    try {
      (void)gmp::CategoryRules::parse(text, "my.rules");
    } catch (const gmp::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad = message("parameter frame Linear\n# fine\nactivation frame ([unclosed\n");
  CHECK(bad.rfind("my.rules:3: bad pattern '([unclosed'", 0) == 0);
  CHECK(bad.find("regular expression") != std::string::npos);
  CHECK(message("parameter stack Linear\n").rfind("my.rules:1: expected 'CATEGORY frame|scope PATTERN'", 0) == 0);
  CHECK(message("\n\nparameter frame\n").rfind("my.rules:3: the rule for 'parameter' has no pattern", 0) == 0);
  CHECK(message("my_own_category scope ^fwd\n") == "no error");  // any category name is fine
  CHECK_THROWS_AS(gmp::CategoryRules::load("/nonexistent/rules.txt"), gmp::IoError);
}
