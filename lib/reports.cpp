// The compiled library's reports: the HTML report, the memory timeline, the Perfetto trace and
// the snapshot summary, instantiated for Snapshot and CompactSnapshot (what snapshot() and the
// snapshot readers return), memory_summary() and the profile exporters (JSON, CSV), defined once
// here for GPUMEMPROF_COMPILED_LIB programs.
#define GPUMEMPROF_LIB_SOURCE 1
#include "gpumemprof/export/formats/profile_export-inl.hpp"
#include "gpumemprof/export/reports/html_report-inl.hpp"
#include "gpumemprof/export/reports/memory_summary-inl.hpp"
#include "gpumemprof/export/reports/memory_timeline-inl.hpp"
#include "gpumemprof/export/reports/perfetto-inl.hpp"
#include "gpumemprof/export/reports/snapshot_summary-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

#define GPUMEMPROF_REPORTS_FOR(S)                                                                                    \
  template void write_html_report<S>(const S&, std::ostream&, const HtmlReportOptions&);                             \
  template void write_html_report<S>(const S&, const std::string&, const HtmlReportOptions&);                        \
  template std::string render_html_report<S>(const S&, const HtmlReportOptions&);                                    \
  template void write_memory_timeline_json<S>(const S&, int, std::ostream&, const CategoryRules*);                   \
  template std::string memory_timeline_svg<S>(const S&, int, const CategoryRules*);                                  \
  template void write_memory_timeline_html<S>(const S&, int, std::ostream&, std::string_view, const CategoryRules*); \
  template void write_memory_timeline_file<S>(const S&, int, const std::string&, const CategoryRules*);              \
  template void write_perfetto<S>(const S&, std::ostream&);                                                          \
  template void write_perfetto_file<S>(const S&, const std::string&);                                                \
  template SnapshotSummary summarize<S>(const S&);
GPUMEMPROF_REPORTS_FOR(Snapshot)
GPUMEMPROF_REPORTS_FOR(CompactSnapshot)
#undef GPUMEMPROF_REPORTS_FOR

GPUMEMPROF_NAMESPACE_END
