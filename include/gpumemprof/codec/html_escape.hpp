// Layer 0 (codecs): text into HTML (element content and quoted attribute values).
#pragma once

#include <string>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Appends `s` to `out` with &, <, > and " escaped.
inline void append_html_escaped(std::string& out, std::string_view s) {
  for (const char c : s) {
    switch (c) {
      case '&': out.append("&amp;"); break;
      case '<': out.append("&lt;"); break;
      case '>': out.append("&gt;"); break;
      case '"': out.append("&quot;"); break;
      default: out.push_back(c);
    }
  }
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
