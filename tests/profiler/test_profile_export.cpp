// Export of results, samples, events and summaries: exact JSON and CSV text, escaping,
// unavailable values as null / empty, atomic files.
#include <unistd.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/export/formats/profile_export.hpp"
#include "profiler_test_util.hpp"

namespace {

gmp::MemorySnapshot fixed_snapshot() {
  gmp::MemorySnapshot s;
  s.timestamp = 1.5;
  s.allocated_memory = 1;
  s.reserved_memory = 2;
  s.active_memory = 3;
  s.inactive_memory = 4;
  s.cpu_memory = 5;
  s.device_id = 1;
  s.operation = "op";
  return s;
}

template <class F>
std::string written(F&& write) {
  std::ostringstream os;
  write(os);
  return os.str();
}

/// A fresh directory for files, removed afterwards.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/gmp-profile-export-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    for (const char* f : {"/r.json", "/r.csv", "/s.csv", "/p.json", "/e.csv"}) ::unlink((path + f).c_str());
    ::rmdir(path.c_str());
  }
  std::string path;
};

}  // namespace

TEST_CASE("export: a snapshot as exact JSON, with unavailable values as null") {
  const std::vector<gmp::MemorySnapshot> one{fixed_snapshot()};
  CHECK(written([&](std::ostream& os) { gmp::write_snapshots_json(os, one); }) ==
        R"([{"timestamp":1.5,"operation":"op","device_id":1,"allocator_level":true,"allocated_memory":1,)"
        R"("reserved_memory":2,"active_memory":3,"inactive_memory":4,"cpu_memory":5,"device_used_memory":null,)"
        R"("device_total_memory":null,"external_memory":null,"stack_trace":null}])");

  gmp::MemorySnapshot device_level = fixed_snapshot();
  device_level.allocator_level = false;
  device_level.device_used_memory = 7;
  device_level.device_total_memory = 8;
  device_level.stack_trace = std::make_shared<const std::vector<gmp::Frame>>(
      std::vector<gmp::Frame>{{"a.cpp", 3, "f()"}, {"b.cpp", 9, "main"}});
  const std::string json = written([&](std::ostream& os) { gmp::write_snapshots_json(os, {device_level}); });
  CHECK(json.find(R"("allocated_memory":null,"reserved_memory":null,"active_memory":null,"inactive_memory":null)") !=
        std::string::npos);
  CHECK(json.find(R"("device_used_memory":7,"device_total_memory":8)") != std::string::npos);
  CHECK(json.find(R"("stack_trace":"f() at a.cpp:3; main at b.cpp:9")") != std::string::npos);
}

TEST_CASE("export: names are escaped in JSON and quoted in CSV") {
  gmp::ProfileResult r;
  r.name =
      "a\"b\\c\nd\x01"
      "e,\xC3\xA9\xFF";  // quote, backslash, newline, control, comma, é, a bad byte
  r.memory_allocated = 10;
  r.memory_freed = 4;
  r.exception_message = "say \"hi\"";
  const std::string json = written([&](std::ostream& os) { gmp::write_results_json(os, {r}); });
  CHECK(json.find(R"("name":"a\"b\\c\nd\u0001e,)"
                  "\xC3\xA9\xEF\xBF\xBD\"") != std::string::npos);
  CHECK(json.find(R"("memory_diff":6)") != std::string::npos);
  CHECK(json.find(R"("exception_message":"say \"hi\"")") != std::string::npos);
  CHECK(json.find(R"("memory_before":{"timestamp":0.0)") != std::string::npos);

  const std::string csv = written([&](std::ostream& os) { gmp::write_results_csv(os, {r}); });
  const auto header_end = csv.find("\r\n");
  REQUIRE(header_end != std::string::npos);
  const std::string header = csv.substr(0, header_end);
  CHECK(header.rfind("name,execution_time,memory_allocated,memory_freed,memory_diff,peak_memory_usage,"
                     "tensors_created,tensors_deleted,depth,allocator_level,exception_message,memory_before.timestamp,",
                     0) == 0);
  CHECK(header.find("memory_peak.stack_trace") != std::string::npos);
  const std::string row = csv.substr(header_end + 2);
  CHECK(row.rfind("\"a\"\"b\\c\nd\x01"
                  "e,\xC3\xA9\xFF\",0,10,4,6,0,0,0,0,true,\"say \"\"hi\"\"\",",
                  0) == 0);
  CHECK(row.size() >= 2);
  CHECK(row.substr(row.size() - 2) == "\r\n");
}

TEST_CASE("export: CSV of samples leaves unavailable values empty") {
  gmp::MemorySnapshot s = fixed_snapshot();
  s.allocator_level = false;
  s.device_used_memory = 123;
  const std::string csv = written([&](std::ostream& os) { gmp::write_snapshots_csv(os, {s}); });
  CHECK(csv ==
        "timestamp,operation,device_id,allocator_level,allocated_memory,reserved_memory,active_memory,"
        "inactive_memory,cpu_memory,device_used_memory,device_total_memory,external_memory,stack_trace\r\n"
        "1.5,op,1,false,,,,,5,123,,,\r\n");
}

TEST_CASE("export: tracker events and the summary") {
  gmp::TrackingEvent e;
  e.type = gmp::TrackingEventType::warning;
  e.alert = gmp::AlertKind::jump;
  e.timestamp = 2.0;
  e.memory_allocated = 100;
  e.memory_reserved = 200;
  e.memory_change = 50;
  e.message = "large jump";
  e.value = 50;
  e.threshold = 10;
  const std::string csv = written([&](std::ostream& os) { gmp::write_events_csv(os, {e}); });
  CHECK(
      csv ==
      "timestamp,event_type,alert,memory_allocated,memory_reserved,memory_change,device_id,message,value,threshold\r\n"
      "2,warning,jump,100,200,50,0,large jump,50,10\r\n");
  e.alert = gmp::AlertKind::none;
  const std::string json = written([&](std::ostream& os) { gmp::write_events_json(os, {e}); });
  CHECK(json.find(R"("alert":null)") != std::string::npos);

  gmp::ProfileSummary s;
  s.device = "sim:0";
  s.allocator_level = false;
  s.total_function_calls = 2;
  s.function_summaries["f\"x"] = gmp::FunctionSummary{.call_count = 2, .total_time = 1.0, .avg_time = 0.5};
  std::ostringstream os;
  gmp::JsonWriter w(os);
  gmp::write_summary_json(w, s);
  w.finish();
  const std::string sj = os.str();
  CHECK(sj.find(R"("allocator_level":false)") != std::string::npos);
  CHECK(sj.find(R"("total_memory_allocated":null)") != std::string::npos);
  CHECK(sj.find(R"("function_summaries":{"f\"x":{"call_count":2,"total_time":1.0,"avg_time":0.5,)"
                R"("total_memory_allocated":null,"avg_memory_allocated":null)") != std::string::npos);
}

TEST_CASE("export: files are written atomically in the format their name asks for") {
  SimDevice d;
  gmp::GPUMemoryProfiler profiler(d.allocator);
  profiler.profile_function("step", [&] { d.free(d.alloc(MiB)); });
  profiler.sample_now();
  TempDir dir;

  gmp::export_results(profiler.results(), dir.path + "/r.json");
  CHECK(gmp::read_file(dir.path + "/r.json") ==
        written([&](std::ostream& os) { gmp::write_results_json(os, profiler.results()); }));
  gmp::export_results(profiler.results(), dir.path + "/r.csv");
  CHECK(gmp::read_file(dir.path + "/r.csv").rfind("name,execution_time,", 0) == 0);
  gmp::export_snapshots(profiler.snapshots(), dir.path + "/s.csv");
  CHECK(gmp::read_file(dir.path + "/s.csv").find("monitoring") != std::string::npos);
  gmp::export_events({}, dir.path + "/e.csv", gmp::ExportFormat::csv);
  CHECK(gmp::read_file(dir.path + "/e.csv").rfind("timestamp,event_type", 0) == 0);

  gmp::export_profile(profiler, dir.path + "/p.json");
  const std::string doc = gmp::read_file(dir.path + "/p.json");
  CHECK(doc.rfind(R"({"summary":{"device":"sim:0","allocator_level":true,"total_functions_profiled":1,)", 0) == 0);
  CHECK(doc.find(R"("results":[{"name":"step")") != std::string::npos);
  CHECK(doc.find(R"("snapshots":[{"timestamp":)") != std::string::npos);
  CHECK(doc.find(R"("function_summaries":{"step":{"call_count":1,)") != std::string::npos);

  CHECK_THROWS_AS(gmp::export_results({}, dir.path + "/r.txt"), std::invalid_argument);
  CHECK_THROWS_AS(gmp::export_results({}, "/nonexistent-dir-gmp/r.json"), gmp::IoError);
}
