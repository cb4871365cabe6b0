// Layer 5: the owners of device memory outside the allocator (OwnerMemory: library, bytes, count,
// top call site and its stack) as a list of dicts -- in snapshots' device_memory key and the
// cross-rank reports.
#pragma once

#include <string>
#include <vector>

#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/device/owner_memory.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// `key: [{owner, bytes, count, top_site[, top_stack]}, ...]`.
inline void write_owners(ValueWriter& w, const char* key, const std::vector<OwnerMemory>& owners) {
  w.key(key);
  w.begin_list();
  for (const OwnerMemory& o : owners) {
    w.begin_dict();
    w.field("owner", o.owner);
    w.field("bytes", o.bytes);
    w.field("count", o.count);
    w.field("top_site", o.top_site);
    if (!o.top_stack.empty()) {  // recorded only with track_external_memory({.stacks = true})
      w.key("top_stack");
      w.begin_list();
      for (const std::string& frame : o.top_stack) w.value(frame);
      w.end_list();
    }
    w.end_dict();
  }
  w.end_list();
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
