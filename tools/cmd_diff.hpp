// `gpumemprof diff A B`: two snapshots, or two profiles written by export_profile, compared by
// allocation site and by profiled scope; exit 1 when B's peak exceeds A's by more than --budget.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "cli_args.hpp"
#include "cmd_ranks.hpp"
#include "cmd_replay_snapshot.hpp"
#include "gpumemprof/analysis/memory_diff.hpp"
#include "gpumemprof/codec/json_reader.hpp"
#include "gpumemprof/export/formats/snapshot_reader.hpp"
#include "trace.hpp"

namespace gpumemprof::tools {

namespace detail_diff {
inline std::int64_t int_or_zero(const DataValue* d, std::string_view key) {
  const DataValue* v = d == nullptr ? nullptr : d->find(key);
  if (v == nullptr || v->is_none()) return 0;
  if (v->is(DataValue::Kind::integer)) return v->as_int();
  if (v->is(DataValue::Kind::floating)) return static_cast<std::int64_t>(v->as_double());
  return 0;
}
}  // namespace detail_diff

/// A profile JSON (export_profile: summary, results, snapshots) as sites-less usage with scopes.
inline MemoryUsage usage_from_profile(const DataValue& root, const std::string& path) {
  const DataValue* summary = root.find("summary");
  if (summary == nullptr || !summary->is(DataValue::Kind::dict)) {
    throw FormatError(path + ": a profile JSON needs a 'summary' object (write it with export_profile)");
  }
  auto bytes = [](const DataValue* d, std::string_view key) {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(0, detail_diff::int_or_zero(d, key)));
  };
  MemoryUsage u;
  u.from_profile = true;
  u.total.peak_allocated_bytes = bytes(summary, "peak_memory_usage");
  u.total.allocated_at_end_bytes = detail_diff::int_or_zero(summary, "current_memory_usage");
  u.total.calls = bytes(summary, "total_function_calls");
  if (const DataValue* fs = summary->find("function_summaries"); fs != nullptr && fs->is(DataValue::Kind::dict)) {
    for (const auto& [k, v] : fs->entries()) {
      if (!k.is(DataValue::Kind::string)) continue;
      UsageCounts& c = u.scopes[k.as_string()];
      c.peak_allocated_bytes = bytes(&v, "peak_memory");
      c.net_change_bytes = detail_diff::int_or_zero(&v, "net_memory_change");
      c.calls = bytes(&v, "call_count");
    }
  }
  if (const DataValue* results = root.find("results"); results != nullptr && results->is(DataValue::Kind::list)) {
    for (const DataValue& r : results->items()) {
      const DataValue* name = r.find("name");
      const std::uint64_t created = bytes(&r, "tensors_created");
      // The run's count from outermost calls only: a nested call's allocations are its outer
      // call's too (files written before "depth" existed count every call).
      if (detail_diff::int_or_zero(&r, "depth") == 0) u.total.allocations += created;
      if (name != nullptr && name->is(DataValue::Kind::string)) u.scopes[name->as_string()].allocations += created;
    }
  }
  return u;
}

/// A snapshot (pickle or JSON, gzip or not) or a profile JSON, recognised by content.
/// A plain pickle is streamed (a 10M-entry snapshot in under 1 GB, as summary and html).
inline MemoryUsage load_usage(const std::string& path) {
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    const int first = std::fgetc(f);
    std::fclose(f);
    if (first == 0x80) return usage_from_snapshot(load_compact_snapshot(path));
  }
  const std::string bytes = read_gzip_file(path);
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80)
    return usage_from_snapshot(parse_compact_snapshot(bytes, path));
  if (!is_snapshot_bytes(bytes)) {
    throw FormatError(path + ": neither a snapshot (pickle or JSON) nor a profile JSON written by export_profile");
  }
  DataValue root;
  try {
    root = parse_json(bytes);
  } catch (const FormatError& e) {
    throw FormatError(path + ": " + e.what());
  }
  if (root.find("segments") != nullptr) return usage_from_snapshot(snapshot_from_value(root, path));
  return usage_from_profile(root, path);
}

inline int cmd_diff(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--help"}, {"--budget", "--top"});
  if (args.has("--help")) {
    std::fputs(
        "usage: gpumemprof diff A B [--budget BYTES|PERCENT%] [--top N]\n"
        "  Compares two snapshots (PyTorch's or ours) by allocation site (the user's frame of each stack),\n"
        "  or two profile JSONs (export_profile) by profiled scope: peak allocated (block bytes, PyTorch's\n"
        "  max_memory_allocated), peak and final requested bytes, net change, calls, allocations, new and\n"
        "  vanished sites. With --budget (e.g. 64MiB or 5%), exits 1 when B's peak allocated exceeds A's by\n"
        "  more than the budget. A folder of rank files stands for its rank with the largest peak allocated.\n",
        stdout);
    return 0;
  }
  args.expect_positional(2, "two files, A and B");
  std::uint64_t budget = 0;
  bool budget_percent = false;
  double percent = 0;
  if (args.has("--budget")) {
    const std::string b = args.get("--budget");
    if (!b.empty() && b.back() == '%') {
      budget_percent = true;
      try {
        std::size_t used = 0;
        percent = std::stod(b.substr(0, b.size() - 1), &used);
        if (used != b.size() - 1 || !(percent >= 0)) throw std::invalid_argument(b);
      } catch (const std::exception&) {
        throw UsageError("--budget takes bytes (64MiB) or a percentage (5%), got '" + b + "'");
      }
    } else {
      try {
        budget = gpumemprof::detail::parse_bytes(b, "--budget");
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
  }
  const std::string pa = worst_rank_file(args.positional()[0], "diff");  // a rank folder: its worst rank
  const std::string pb = worst_rank_file(args.positional()[1], "diff");
  const MemoryUsage a = load_usage(pa);
  const MemoryUsage b = load_usage(pb);
  if (a.from_profile != b.from_profile) {
    const std::string& profile = a.from_profile ? pa : pb;
    const std::string& snapshot = a.from_profile ? pb : pa;
    throw UsageError("'" + profile + "' is a profile JSON and '" + snapshot +
                     "' a snapshot: compare two snapshots or two profiles");
  }
  std::printf("A: %s\nB: %s\n", pa.c_str(), pb.c_str());
  if (a.unmatched_frees + b.unmatched_frees != 0) {
    std::printf("(a trace starts mid-run: frees of earlier blocks ignored, A %llu, B %llu)\n",
                static_cast<unsigned long long>(a.unmatched_frees), static_cast<unsigned long long>(b.unmatched_frees));
  }
  const MemoryDiff d = diff_usage(a, b);
  std::fputs(format_diff(d, args.count("--top", 20)).c_str(), stdout);
  if (!args.has("--budget")) return 0;
  // The budget bounds the peak allocated bytes; where a trace could not be replayed, the peak
  // requested bytes (and the verdict says so).
  const bool allocated = a.total.peak_allocated_bytes && b.total.peak_allocated_bytes;
  const auto peak_a = allocated ? *a.total.peak_allocated_bytes : a.total.peak_requested_bytes;
  const auto peak_b = allocated ? *b.total.peak_allocated_bytes : b.total.peak_requested_bytes;
  const char* peak_name = allocated ? "peak allocated" : "peak requested";
  if (budget_percent) budget = static_cast<std::uint64_t>(static_cast<double>(peak_a) * percent / 100.0);
  const std::int64_t growth = static_cast<std::int64_t>(peak_b) - static_cast<std::int64_t>(peak_a);
  const std::string limit = format_size(budget) + (budget_percent ? " (" + args.get("--budget") + " of A's)" : "");
  if (growth > static_cast<std::int64_t>(budget)) {
    std::printf("over budget: B's %s exceeds A's by %s, more than %s\n", peak_name, format_size_change(growth).c_str(),
                limit.c_str());
    return 1;
  }
  std::printf("within budget: %s change %s, budget %s\n", peak_name, format_size_change(growth).c_str(), limit.c_str());
  return 0;
}

}  // namespace gpumemprof::tools
