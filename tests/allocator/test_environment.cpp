// Bad values of GPUMEMPROF_ALLOC_CONF, GPUMEMPROF_DEVICE and GPUMEMPROF_SIM_CAPACITY: the first
// call that reads one throws a typed error naming the variable and its value; nothing reads them
// during static initialisation, so a process started with a bad value runs until that call.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "catch.hpp"
#include "gpumemprof/detail/parse_bytes.hpp"
#include "gpumemprof/gpumemprof.hpp"

namespace gmp = gpumemprof;
using Catch::Matchers::Contains;

extern char** environ;

namespace {
struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;
  ~EnvVar() { ::unsetenv(name); }
};

/// Runs this test binary on `test_name` with `assignment` ("NAME=value") added to the environment;
/// returns its exit status (or 128 + signal).
int run_child(const std::string& test_name, const std::string& assignment) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(assignment);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", name = test_name;
  std::vector<char*> argv{self.data(), name.data(), nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace

TEST_CASE("a bad GPUMEMPROF_ALLOC_CONF is a ConfigError from the first use, naming variable and value") {
  const EnvVar bad("GPUMEMPROF_ALLOC_CONF", "max_split_size_mb:lots");
  const auto sim5 = gmp::Device::sim(5);
  CHECK_THROWS_AS(gmp::default_allocator(sim5), gmp::ConfigError);
  CHECK_THROWS_WITH(gmp::memory_allocated(sim5), Contains("environment variable GPUMEMPROF_ALLOC_CONF") &&
                                                     Contains("'max_split_size_mb:lots'") &&
                                                     Contains("max_split_size_mb") && Contains("unset"));
  // One message: the variable is named where it is quoted and where the fix is said, no more.
  try {
    (void)gmp::memory_reserved(sim5);
    FAIL("no error");
  } catch (const gmp::ConfigError& e) {
    const std::string msg = e.what();
    std::size_t count = 0;
    for (auto at = msg.find("GPUMEMPROF_ALLOC_CONF"); at != std::string::npos;
         at = msg.find("GPUMEMPROF_ALLOC_CONF", at + 1)) {
      ++count;
    }
    CHECK(count == 2);
  }
}

TEST_CASE("the default allocator is created once the variable is fixed") {
  {
    const EnvVar bad("GPUMEMPROF_ALLOC_CONF", "garbage_collection_threshold:2");
    CHECK_THROWS_AS(gmp::default_allocator(gmp::Device::sim(6)), gmp::ConfigError);
  }
  const EnvVar good("GPUMEMPROF_ALLOC_CONF", "max_split_size_mb:64");
  CHECK(gmp::default_allocator(gmp::Device::sim(6)).config().max_split_size == 64u << 20);
}

TEST_CASE("a bad GPUMEMPROF_DEVICE is a DeviceError from the first call that needs the current device") {
  const EnvVar bad("GPUMEMPROF_DEVICE", "gpu\x1b[2J");
  CHECK_THROWS_AS(gmp::Device(), gmp::DeviceError);
  CHECK_THROWS_WITH(gmp::memory_allocated(),
                    Contains("environment variable GPUMEMPROF_DEVICE='gpu\\x1b[2J'") && Contains("sim:N"));
}

TEST_CASE("a bad GPUMEMPROF_SIM_CAPACITY is a ConfigError naming variable and value") {
  const EnvVar bad("GPUMEMPROF_SIM_CAPACITY", "12 parsecs");
  CHECK_THROWS_AS(gmp::default_allocator(gmp::Device::sim(7)), gmp::ConfigError);
  CHECK_THROWS_WITH(gmp::memory_reserved(gmp::Device::sim(7)),
                    Contains("environment variable GPUMEMPROF_SIM_CAPACITY='12 parsecs'") && Contains("binary units"));
}

TEST_CASE("sizes: whole numbers or fractions with a binary unit, in whole bytes") {
  using gmp::detail::parse_bytes;
  CHECK(parse_bytes("1048576", "x") == 1048576u);
  CHECK(parse_bytes("40GiB", "x") == std::size_t{40} << 30);
  CHECK(parse_bytes("132.75MiB", "x") == 139198464u);  // where reduction buffers stop on an H200
  CHECK(parse_bytes("1.5G", "x") == std::size_t{3} << 29);
  CHECK(parse_bytes("1.0", "x") == 1u);
  for (const char* bad : {"0.1K", "0.000001T", "1.5", "1.", ".5M", "1.1234567M", "1.5X", "-1", "16777216T", "1.5.5M", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_bytes(bad, "--capacity"), Contains("--capacity: cannot read") && Contains("132.75MiB"));
  }
}

// Run only by the test below, in a child process started with a bad variable.
TEST_CASE("environment child: first use throws", "[.env-child]") {
  try {
    (void)gmp::memory_allocated(gmp::Device::sim(4));
  } catch (const gmp::ConfigError& e) {
    std::exit(std::string(e.what()).find("GPUMEMPROF_") != std::string::npos ? 3 : 4);
  } catch (const gmp::DeviceError& e) {
    std::exit(std::string(e.what()).find("GPUMEMPROF_DEVICE") != std::string::npos ? 5 : 4);
  }
  std::exit(6);
}
TEST_CASE("environment child: current device", "[.env-child-device]") {
  try {
    (void)gmp::memory_allocated();
  } catch (const gmp::DeviceError& e) {
    std::exit(std::string(e.what()).find("GPUMEMPROF_DEVICE") != std::string::npos ? 5 : 4);
  }
  std::exit(6);
}

TEST_CASE("a process started with a bad variable survives static initialisation and gets the error") {
  CHECK(run_child("[env-child]", "GPUMEMPROF_ALLOC_CONF=roundup_power2_divisions:3") == 3);
  CHECK(run_child("[env-child]", "GPUMEMPROF_SIM_CAPACITY=-1") == 3);
  CHECK(run_child("[env-child-device]", "GPUMEMPROF_DEVICE=cuda:banana") == 5);
  CHECK(run_child("[env-child]", "GPUMEMPROF_ALLOC_CONF=max_split_size_mb:64") == 6);  // a good value: no error
}

// The umbrella header brings the OOM report (this file includes nothing else of the project).
TEST_CASE("gpumemprof.hpp alone gives attach_oom_reporter") {
  gmp::CachingAllocator<gmp::SimulatedBackend> a(gmp::SimulatedBackend(gmp::SimulatedOptions{64u << 20}),
                                                 gmp::AllocatorConfig(""));
  auto reporter = gmp::attach_oom_reporter(a);
  CHECK_THROWS_AS((void)a.allocate(std::size_t{128} << 20), gmp::OutOfMemoryError);
  CHECK(reporter->count() == 1);
  REQUIRE(reporter->last().has_value());
  CHECK(reporter->last()->block_bytes == std::uint64_t{128} << 20);
  CHECK(reporter->last()->device_name == "sim:0");
}
