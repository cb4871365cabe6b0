// Memory categories: RAII tags per thread (nested, innermost wins), carried by the block, by the
// history's user_metadata and by the category ledger's exact byte counts.
#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"
#include "gpumemprof/history/category_ledger.hpp"
#include "gpumemprof/history/memory_category.hpp"
#include "history_util.hpp"

namespace cat = gmp::category;
using gmp::TraceAction;

namespace {

/// The categories carried by the entries of one action, in order.
std::vector<std::string> categories(const std::vector<gmp::TraceEntry>& trace, TraceAction a) {
  std::vector<std::string> out;
  for (const auto& e : only(trace, a)) out.emplace_back(gmp::category_of_metadata(e.user_metadata));
  return out;
}

/// A recorded simulated allocator with a category ledger.
struct Categorized : Recorded {
  Categorized() { ledger.attach(a()); }
  gmp::CategoryStat stat(const std::string& name) const {
    const gmp::CategoryStats s = ledger.stats();
    const auto it = s.find(name);
    return it == s.end() ? gmp::CategoryStat{-1, -1} : it->second;
  }
  gmp::CategoryLedger ledger;  // after the allocator: detached first
};

}  // namespace

TEST_CASE("Category scopes nest per thread and the innermost wins") {
  CHECK(gmp::current_memory_category().empty());
  {
    auto outer = gmp::memory_category(cat::activation);
    CHECK(gmp::current_memory_category() == "activation");
    {
      auto inner = gmp::memory_category("kv_cache");  // any string is a category
      CHECK(gmp::current_memory_category() == "kv_cache");
      std::thread([] { CHECK(gmp::current_memory_category().empty()); }).join();
    }
    CHECK(gmp::current_memory_category() == "activation");
    {
      auto untagged = gmp::memory_category("");
      CHECK(gmp::current_memory_category().empty());
    }
  }
  CHECK(gmp::current_memory_category().empty());
}

TEST_CASE("Tagged allocations carry the category in blocks, history and the ledger") {
  Categorized r;
  auto& a = r.a();
  void* p = nullptr;
  void* g = nullptr;
  void* u = a.allocate(1000);
  {
    auto outer = gmp::memory_category(cat::parameter);
    p = a.allocate(3 * MiB);
    {
      auto inner = gmp::memory_category(cat::gradient);
      g = a.allocate(5000);
    }
  }
  a.validate();
  std::map<std::uintptr_t, std::string> block_category;
  for (const auto& seg : a.segments()) {
    for (const auto& b : seg.blocks) {
      if (b.state != gmp::BlockState::inactive) {
        block_category[b.address] = gmp::detail::MetadataStrings::instance().lookup(b.category);
      }
    }
  }
  CHECK(block_category.at(addr(p)) == "parameter");
  CHECK(block_category.at(addr(g)) == "gradient");
  CHECK(block_category.at(addr(u)).empty());

  CHECK(r.stat("parameter").current == 3 * MiB);
  CHECK(r.stat("gradient").current == 5000);
  CHECK(r.stat("unknown").current == 1000);

  // Freed in another category's scope: the bytes leave the category they were allocated in.
  {
    auto other = gmp::memory_category(cat::optimizer_state);
    a.deallocate(g);
    a.deallocate(p);
  }
  a.deallocate(u);
  a.validate();
  CHECK(r.stat("parameter").current == 0);
  CHECK(r.stat("parameter").peak == 3 * MiB);
  CHECK(r.stat("gradient").current == 0);
  CHECK(r.stat("gradient").peak == 5000);
  CHECK(r.stat("unknown").peak == 1000);
  CHECK(r.stat("optimizer_state").current == -1);  // never allocated under: not listed

  const auto trace = r.recorder.trace();
  CHECK(categories(trace, TraceAction::alloc) == std::vector<std::string>{"", "parameter", "gradient"});
  CHECK(categories(trace, TraceAction::free_requested) == std::vector<std::string>{"gradient", "parameter", ""});
  CHECK(categories(trace, TraceAction::free_completed) == std::vector<std::string>{"gradient", "parameter", ""});
}

TEST_CASE("A category joins the thread's own user metadata in the trace entry") {
  Recorded r;
  gmp::UserMetadataScope md("step 3");
  void* p = nullptr;
  {
    auto tag = gmp::memory_category(cat::input);
    p = r.a().allocate(4096);
  }
  r.a().deallocate(p);
  const auto trace = r.recorder.trace();
  const auto allocs = only(trace, TraceAction::alloc);
  REQUIRE(allocs.size() == 1);
  CHECK(allocs[0].user_metadata == "step 3; category=input");
  CHECK(only(trace, TraceAction::free_completed).at(0).user_metadata == "step 3; category=input");

  // The snapshot's pickle keeps it: reopened, the entry still names its category.
  const gmp::Snapshot s = gmp::snapshot(r.a());
  bool found = false;
  for (const auto& e : s.device_traces.at(0)) found |= gmp::category_of_metadata(e.user_metadata) == "input";
  CHECK(found);
}

TEST_CASE("category_of_metadata reads only a category key of its own") {
  CHECK(gmp::category_of_metadata("category=activation") == "activation");
  CHECK(gmp::category_of_metadata("fwd; category=my category") == "my category");
  CHECK(gmp::category_of_metadata("subcategory=x").empty());
  CHECK(gmp::category_of_metadata("").empty());
  CHECK(gmp::metadata_with_category("", "") == "");
  CHECK(gmp::metadata_with_category("fwd", "") == "fwd");
  CHECK(gmp::category_of_metadata(gmp::metadata_with_category("a; b", "c=d")) == "c=d");
}

TEST_CASE("Categories are exact across threads, with frees by another thread") {
  Categorized r;
  auto& a = r.a();
  constexpr int kThreads = 4;
  constexpr int kAllocs = 50;
  const char* names[kThreads] = {cat::activation, cat::temporary, cat::gradient, "kv_cache"};
  std::vector<std::vector<void*>> made(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      auto tag = gmp::memory_category(names[t]);
      for (int i = 0; i < kAllocs; ++i) {
        made[t].push_back(a.allocate(static_cast<std::size_t>(1000 * (t + 1)), gmp::Stream(static_cast<std::uintptr_t>(t))));
      }
    });
  }
  for (auto& w : workers) w.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(r.stat(names[t]).current == 1000 * (t + 1) * kAllocs);
    CHECK(r.stat(names[t]).peak == 1000 * (t + 1) * kAllocs);
  }
  CHECK(r.stat("unknown").current == 0);
  // Thread t frees thread (t + 1)'s allocations under its own category: bytes leave the owner's.
  workers.clear();
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      auto tag = gmp::memory_category(names[t]);
      const auto& theirs = made[(t + 1) % kThreads];
      for (std::size_t i = 0; i < theirs.size() / 2; ++i) a.deallocate(theirs[i]);
    });
  }
  for (auto& w : workers) w.join();
  a.validate();
  std::int64_t sum = 0;
  for (int t = 0; t < kThreads; ++t) {
    CHECK(r.stat(names[t]).current == 1000 * (t + 1) * (kAllocs / 2));
    CHECK(r.stat(names[t]).peak == 1000 * (t + 1) * kAllocs);
    sum += r.stat(names[t]).current;
  }
  CHECK(sum == a.memory_stats().requested_bytes.all().current);
  for (auto& v : made) {
    for (std::size_t i = v.size() / 2; i < v.size(); ++i) a.deallocate(v[i]);
  }
}

TEST_CASE("A block pending free stays in its category until the free completes") {
  Categorized r;
  auto& a = r.a();
  const gmp::Stream other(7);
  void* p = nullptr;
  {
    auto tag = gmp::memory_category(cat::activation);
    p = a.allocate(2 * MiB);
  }
  a.record_stream(p, other);
  a.deallocate(p);  // pending: an event on `other`
  CHECK(r.stat("activation").current == 2 * MiB);
  r.sim.sim().complete_all_events();
  void* q = a.allocate(512);  // processes the completed event
  CHECK(r.stat("activation").current == 0);
  CHECK(r.stat("unknown").current == 512);
  a.deallocate(q);
  a.validate();
}

TEST_CASE("Categories count allocated (block) bytes beside requested bytes") {
  Categorized r;
  auto& a = r.a();
  const gmp::Stream other(9);
  void* bn = nullptr;
  void* conv = nullptr;
  void* big = nullptr;
  {
    auto tag = gmp::memory_category(cat::gradient);
    bn = a.allocate(256);      // a BatchNorm weight's gradient: a 512-byte block
    conv = a.allocate(37632);  // conv1's: rounded to 37888
  }
  {
    auto tag = gmp::memory_category(cat::optimizer_state);
    big = a.allocate(19 * MiB);  // a 20 MiB segment; the 1 MiB remainder stays in the block
  }
  a.validate();
  CHECK(r.stat("gradient").current == 256 + 37632);
  CHECK(r.stat("gradient").allocated_current == 512 + 37888);
  CHECK(r.stat("optimizer_state").current == 19 * MiB);
  CHECK(r.stat("optimizer_state").allocated_current == 20 * MiB);
  const auto sums = [&] {
    std::int64_t requested = 0;
    std::int64_t allocated = 0;
    for (const auto& [name, s] : r.ledger.stats()) {
      requested += s.current;
      allocated += s.allocated_current;
    }
    const auto stats = a.memory_stats();
    CHECK(requested == stats.requested_bytes.all().current);
    CHECK(allocated == stats.allocated_bytes.all().current);
  };
  sums();
  // allocated drops when the free is requested, requested when it completes (memory_stats' rule).
  a.record_stream(conv, other);
  a.deallocate(conv);
  CHECK(r.stat("gradient").current == 256 + 37632);
  CHECK(r.stat("gradient").allocated_current == 512);
  sums();
  r.sim.sim().complete_all_events();
  void* q = a.allocate(100);  // processes the completed event; unknown: 100 requested, 512 allocated
  CHECK(r.stat("gradient").current == 256);
  CHECK(r.stat("unknown").current == 100);
  CHECK(r.stat("unknown").allocated_current == 512);
  sums();
  a.deallocate(q);
  a.deallocate(bn);
  a.deallocate(big);
  a.validate();
  CHECK(r.stat("gradient").allocated_current == 0);
  CHECK(r.stat("gradient").allocated_peak == 512 + 37888);
  CHECK(r.stat("gradient").peak == 256 + 37632);
  CHECK(r.stat("optimizer_state").allocated_peak == 20 * MiB);
  r.ledger.reset_peaks();
  CHECK(r.stat("optimizer_state").allocated_peak == 0);
  CHECK(r.stat("optimizer_state").peak == 0);
}

TEST_CASE("set_category moves a live allocation and its bytes to another category") {
  Categorized r;
  auto& a = r.a();
  const auto id = [](const char* name) { return gmp::detail::MetadataStrings::instance().intern(name); };
  void* w = a.allocate(3000);  // untagged, as PyTorch's parameters before categorize()
  void* s = nullptr;
  {
    auto tag = gmp::memory_category(cat::input);
    s = a.allocate(1 * MiB);
  }
  CHECK(a.set_category(w, id(cat::parameter)));
  CHECK(r.stat("parameter").current == 3000);
  CHECK(r.stat("parameter").peak == 3000);
  CHECK(r.stat("parameter").allocated_current == 3072);
  CHECK(r.stat("parameter").allocated_peak == 3072);
  CHECK(r.stat("unknown").current == 0);
  CHECK(r.stat("unknown").allocated_current == 0);
  CHECK(r.stat("unknown").allocated_peak == 3072);
  // only_untagged: a tagged block keeps its category (saved-tensor hooks meet inputs and weights).
  CHECK_FALSE(a.set_category(s, id(cat::activation), true));
  CHECK_FALSE(a.set_category(w, id(cat::parameter)));  // already there
  CHECK(r.stat("input").current == 1 * MiB);
  CHECK(r.stat("activation").peak <= 0);  // never held bytes (-1: not listed at all)
  // Not a live allocation: nothing changes.
  CHECK_FALSE(a.set_category(static_cast<char*>(s) + 512, id(cat::gradient)));
  CHECK(r.stat("gradient").peak <= 0);
  CHECK(a.set_category(s, id(cat::activation)));
  a.validate();
  a.deallocate(s);
  a.deallocate(w);
  CHECK(r.stat("parameter").current == 0);
  CHECK(r.stat("input").current == 0);
  CHECK(r.stat("input").peak == 1 * MiB);
  CHECK(r.stat("activation").current == 0);
  CHECK(r.stat("activation").peak == 1 * MiB);
  CHECK_FALSE(a.set_category(w, id(cat::parameter)));  // freed
  a.validate();
  // The trace has no entry for the moves (PyTorch has no such action); the frees carry the new
  // category, and the snapshot keeps the moves beside the trace, each after the entries before it.
  const auto trace = r.recorder.trace();
  CHECK(trace.size() == 1 + 2 + 2 + 2);  // one small-pool segment, 2 allocs, 2 frees requested and completed
  CHECK(categories(trace, TraceAction::free_requested) == std::vector<std::string>{"activation", "parameter"});
  const gmp::Snapshot snap = gmp::snapshot(a);
  REQUIRE(snap.category_changes.size() == 1);
  const auto& moves = snap.category_changes[0];
  REQUIRE(moves.size() == 2);
  CHECK(moves[0].trace_index == 3);  // after the segment and the two allocs
  CHECK(moves[0].addr == addr(w));
  CHECK(moves[0].size == 3000);
  CHECK(moves[0].category == "parameter");
  CHECK(moves[0].previous.empty());
  CHECK(moves[1].trace_index == 3);
  CHECK(moves[1].category == "activation");
  CHECK(moves[1].previous == "input");
}

TEST_CASE("A ledger attached late starts from the live blocks' categories") {
  Recorded r;
  auto& a = r.a();
  void* p = nullptr;
  void* u = a.allocate(700);
  {
    auto tag = gmp::memory_category(cat::parameter);
    p = a.allocate(9000);
  }
  gmp::CategoryLedger ledger;
  ledger.attach(a);
  auto stats = ledger.stats();
  CHECK(stats["parameter"].current == 9000);
  CHECK(stats["parameter"].peak == 9000);
  CHECK(stats["parameter"].allocated_current == 9216);
  CHECK(stats["parameter"].allocated_peak == 9216);
  CHECK(stats["unknown"].current == 700);
  CHECK(stats["unknown"].allocated_current == 1024);
  a.deallocate(p);
  a.deallocate(u);
  stats = ledger.stats();
  CHECK(stats["parameter"].current == 0);
  CHECK(stats["unknown"].current == 0);
  ledger.reset_peaks();
  CHECK(ledger.stats()["parameter"].peak == 0);
}

TEST_CASE("category_stats counts the default allocator's categories") {
  const gmp::Device dev("sim:6");
  auto& a = gmp::default_allocator(dev);
  const auto before = gmp::category_stats(dev);
  void* p = nullptr;
  {
    auto tag = gmp::memory_category("cat17_default_test");
    p = a.allocate(12345);
  }
  auto stats = gmp::category_stats(dev);
  CHECK(stats["cat17_default_test"].current == 12345);
  a.deallocate(p);
  stats = gmp::category_stats(dev);
  CHECK(stats["cat17_default_test"].current == 0);
  CHECK(stats["cat17_default_test"].peak == 12345);
  CHECK(stats["unknown"].current == before.at("unknown").current);
}

TEST_CASE("reset_category_peaks restarts the peaks from the bytes after the frees made before it") {
  const gmp::Device dev("sim:6");
  auto& a = gmp::default_allocator(dev);
  void* p = nullptr;
  {
    auto tag = gmp::memory_category("reset_after_free_test");
    p = a.allocate(2 << 20);
  }
  CHECK(gmp::category_stats(dev)["reset_after_free_test"].peak == (2 << 20));
  a.deallocate(p);  // no read of the stats between the free and the reset
  gmp::reset_category_peaks(dev);
  const auto stats = gmp::category_stats(dev);
  CHECK(stats.at("reset_after_free_test").current == 0);
  CHECK(stats.at("reset_after_free_test").peak == 0);
  CHECK(stats.at("reset_after_free_test").allocated_peak == 0);
}

TEST_CASE("category_stats lists categories only: not annotation names, not user metadata") {
  Categorized r;
  { auto warmup = gmp::annotate("warmup (category_stats test)"); }
  gmp::set_user_metadata("metadata (category_stats test)");
  void* p = nullptr;
  {
    auto step = gmp::annotate("step 0 (category_stats test)");
    auto tag = gmp::memory_category("tagged (category_stats test)");  // interned after the names above
    p = r.a().allocate(4096);
  }
  gmp::set_user_metadata("");
  const gmp::CategoryStats stats = r.ledger.stats();
  CHECK(stats.count("tagged (category_stats test)") == 1);
  CHECK(stats.count("unknown") == 1);
  CHECK(stats.count("warmup (category_stats test)") == 0);
  CHECK(stats.count("step 0 (category_stats test)") == 0);
  CHECK(stats.count("metadata (category_stats test)") == 0);
  CHECK(stats.size() == 2);
  r.a().deallocate(p);
  CHECK(r.ledger.stats().count("tagged (category_stats test)") == 1);  // a category stays listed once freed
}

namespace {
/// The "category" key of each trace entry of device 0, as PyTorch's memory viewer reads it
/// ("-" where an entry has none), and the viewer's legend: the entries' categories, first seen first.
std::vector<std::string> viewer_categories(const gmp::Snapshot& s, std::vector<std::string>& legend) {
  std::ostringstream os;
  gmp::write_snapshot(s, os, gmp::SnapshotFormat::json);
  const gmp::DataValue root = gmp::parse_json(os.str());
  std::vector<std::string> out;
  for (const gmp::DataValue& e : root.find("device_traces")->items()[0].items()) {
    const gmp::DataValue* c = e.find("category");
    out.push_back(c != nullptr ? c->as_string() : "-");
    if (c != nullptr && std::find(legend.begin(), legend.end(), c->as_string()) == legend.end())
      legend.push_back(c->as_string());
  }
  return out;
}
}  // namespace

TEST_CASE("Trace entries carry their category where PyTorch's memory viewer reads it") {
  Categorized r;
  void* p = nullptr;
  {
    auto tag = gmp::memory_category(cat::activation);
    p = r.a().allocate(1 << 20);
  }
  void* q = r.a().allocate(4096);  // untagged
  r.a().deallocate(p);
  std::vector<std::string> legend;
  const std::vector<std::string> cats = viewer_categories(gmp::snapshot(r.a()), legend);
  const std::vector<gmp::TraceEntry> trace = r.recorder.trace();
  REQUIRE(cats.size() >= trace.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    INFO(i << " " << gmp::to_string(trace[i].action));
    const std::string_view c = gmp::category_of_metadata(trace[i].user_metadata);
    CHECK(cats[i] == (c.empty() ? std::string("unknown") : std::string(c)));
  }
  // The viewer's legend is not empty, and holds "unknown" (its script fails on a list without it).
  CHECK(std::find(legend.begin(), legend.end(), "activation") != legend.end());
  CHECK(std::find(legend.begin(), legend.end(), "unknown") != legend.end());
  r.a().deallocate(q);

  // Every entry tagged: no "unknown" to list, so no keys at all (the viewer shows no legend).
  gmp::Snapshot all;
  all.device_traces.emplace_back();
  gmp::TraceEntry e;
  e.user_metadata = gmp::metadata_with_category("", "parameter");
  all.device_traces[0].push_back(e);
  legend.clear();
  CHECK(viewer_categories(all, legend) == std::vector<std::string>{"-"});
  // No entry tagged (PyTorch's own snapshots): written as they were.
  all.device_traces[0][0].user_metadata.clear();
  CHECK(viewer_categories(all, legend) == std::vector<std::string>{"-"});
}
