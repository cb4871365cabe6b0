// Layer 5: the device memory of every rank in the cross-rank report (rank_summary.hpp): what each
// rank's device used at the dump beside the allocator's reserved bytes, the memory outside the
// allocator by owner (NCCL's buffers: "libnccl.so 186.00 MiB"), the CUDA context, module code and
// what is left unattributed. From the ledger each rank file carries (allocator/device_memory.hpp);
// a file without one (PyTorch's own snapshots) shows "?" in text and nulls in JSON.
//
// JSON, per rank: "device_used_bytes", "device_reserved_bytes", "external_bytes",
// "external_by_owner": [{"owner", "bytes", "count", "top_site"}, ...], "external_tracked",
// "context_bytes", "code_bytes", "unattributed_bytes".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "gpumemprof/allocator/device_memory.hpp"
#include "gpumemprof/allocator/format_size.hpp"
#include "gpumemprof/analysis/cross_rank.hpp"
#include "gpumemprof/codec/json_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/export/formats/owners_writer.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// The largest owner outside the allocator on a device: "libnccl.so 186.00 MiB", with its top
/// site when known ("libnccl.so 186.00 MiB (ncclMemAlloc)"); "(none)" when nothing is held.
[[nodiscard]] inline std::string top_external_owner(const DeviceMemory& m) {
  if (m.external_by_owner.empty()) return m.tracking ? "(none)" : "(not tracked)";
  const OwnerMemory& o = m.external_by_owner.front();
  return o.owner + " " + format_size(o.bytes) + (o.top_site.empty() ? std::string() : " (" + o.top_site + ")");
}

/// The ranks' device memory as text: a header and a row per rank; "" when no rank file carries
/// a device ledger.
[[nodiscard]] inline std::string format_rank_device_memory(const CrossRankReport& report) {
  bool any = false, untracked = false;
  for (const RankFacts& r : report.ranks()) {
    any = any || r.device_memory.has_value();
    untracked = untracked || (r.device_memory && !r.device_memory->tracking);
  }
  if (!any) return {};
  std::string out = "device memory at the dump (used: the driver's count; reserved: the allocator's segments):\n";
  char buf[640];
  std::snprintf(buf, sizeof buf, "%5s  %-8s %11s %11s %11s %11s %11s %13s  %s\n", "rank", "device", "used", "reserved",
                "external", "context", "code", "unattributed", "top owner outside the allocator");
  out += buf;
  for (const RankFacts& r : report.ranks()) {
    if (!r.device_memory) {
      std::snprintf(buf, sizeof buf, "%5d  %-8s %11s  (the file carries no device ledger)\n", r.rank,
                    r.device.empty() ? "?" : r.device.c_str(), "?");
      out += buf;
      continue;
    }
    const DeviceMemory& m = *r.device_memory;
    std::snprintf(buf, sizeof buf, "%5d  %-8s %11s %11s %11s %11s %11s %13s  %s\n", r.rank, m.device.c_str(),
                  format_size(m.used).c_str(), format_size(m.reserved).c_str(),
                  m.tracking ? format_size(m.external).c_str() : "?", format_size(m.context).c_str(),
                  format_size(m.code).c_str(), format_signed_size(m.unattributed).c_str(),
                  top_external_owner(m).c_str());
    out += buf;
  }
  if (untracked) {
    out +=
        "  ? memory outside the allocator was not tracked: run with GPUMEMPROF_TRACK_EXTERNAL=1 (the launcher: "
        "--track-external; C++: gpumemprof::track_external_memory())\n";
  }
  return out;
}

/// Writes rank `r`'s device-memory fields into the JSON object being written (see the file comment).
inline void write_rank_device_memory(JsonWriter& w, const RankFacts& r) {
  const DeviceMemory* m = r.device_memory ? &*r.device_memory : nullptr;
  const auto bytes = [&](const char* key, auto value) {
    w.key(key);
    if (m == nullptr) {
      w.value(nullptr);
    } else {
      w.value(static_cast<std::int64_t>(value));
    }
  };
  bytes("device_used_bytes", m ? m->used : 0);
  bytes("device_reserved_bytes", m ? m->reserved : 0);
  bytes("external_bytes", m ? m->external : 0);
  if (m == nullptr) {
    w.key("external_by_owner");
    w.value(nullptr);
    w.key("external_tracked");
    w.value(nullptr);
  } else {
    detail::write_owners(w, "external_by_owner", m->external_by_owner);
    w.field("external_tracked", m->tracking);
  }
  bytes("context_bytes", m ? m->context : 0);
  bytes("code_bytes", m ? m->code : 0);
  bytes("unattributed_bytes", m ? m->unattributed : 0);
}

GPUMEMPROF_NAMESPACE_END
