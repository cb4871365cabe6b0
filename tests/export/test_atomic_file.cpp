// write_file_atomically / read_file: all-or-nothing writes, failures that name the path and
// the reason and leave the old file and no temporary behind.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "export_support.hpp"
#include "gpumemprof/codec/atomic_file.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/export/formats/snapshot_writer.hpp"

using export_test::TempDir;
using gmp::IoError;

namespace {

// Makes a directory refuse new files: permission bits for ordinary users; for root, who
// ignores them, the immutable attribute (where the file system has it). Undone at scope exit.
class LockedDirectory {
 public:
  explicit LockedDirectory(const std::string& dir) : dir_(dir) {
    if (::geteuid() != 0) {
      locked_ = ::chmod(dir.c_str(), 0555) == 0;
      return;
    }
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    int flags = 0;
    if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
      flags |= FS_IMMUTABLE_FL;
      immutable_ = locked_ = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    ::close(fd);
  }
  LockedDirectory(const LockedDirectory&) = delete;
  LockedDirectory& operator=(const LockedDirectory&) = delete;
  ~LockedDirectory() {
    if (!locked_) return;
    if (!immutable_) {
      ::chmod(dir_.c_str(), 0755);
      return;
    }
    const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    int flags = 0;
    if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
      flags &= ~FS_IMMUTABLE_FL;
      ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    if (fd >= 0) ::close(fd);
  }
  [[nodiscard]] bool locked() const { return locked_; }

 private:
  std::string dir_;
  bool locked_ = false;
  bool immutable_ = false;
};

std::string io_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no IoError)";
}

}  // namespace

TEST_CASE("atomic file: writes, replaces and keeps the permission bits") {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  gmp::write_file_atomically(path, std::string_view("first"));
  CHECK(gmp::read_file(path) == "first");
  ::chmod(path.c_str(), 0640);
  gmp::write_file_atomically(path, [](std::ostream& os) { os << "second " << 2; });
  CHECK(gmp::read_file(path) == "second 2");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  CHECK(dir.entries() == std::vector<std::string>{"out.txt"});
  // Large content goes through the unbuffered path of the stream buffer.
  const std::string big(1 << 20, 'z');
  gmp::write_file_atomically(path, std::string_view(big));
  CHECK(gmp::read_file(path) == big);
}

TEST_CASE("atomic file: an exception while producing leaves the old file and no temporary") {
  TempDir dir;
  const std::string path = dir.file("keep.txt");
  gmp::write_file_atomically(path, std::string_view("old content"));
  CHECK_THROWS_AS(gmp::write_file_atomically(path,
                                             [](std::ostream& os) {
                                               os << std::string(200000, 'p');  // part of it on disk already
                                               throw std::runtime_error("producer failed");
                                             }),
                  std::runtime_error);
  CHECK(gmp::read_file(path) == "old content");
  CHECK(dir.entries() == std::vector<std::string>{"keep.txt"});

  // The snapshot writer's 2^53 refusal mid-file is such an exception.
  gmp::Snapshot bad = export_test::make_full_snapshot();
  bad.device_traces[0].back().size = std::uint64_t{1} << 60;
  CHECK_THROWS_AS(gmp::write_snapshot_file(bad, path), std::invalid_argument);
  CHECK(gmp::read_file(path) == "old content");
  CHECK(dir.entries() == std::vector<std::string>{"keep.txt"});
}

TEST_CASE("atomic file: a terminating signal mid-write removes the temporary; the old file stays") {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGXFSZ, SIGUSR1}) {
    TempDir dir;
    const std::string path = dir.file("keep.txt");
    gmp::write_file_atomically(path, std::string_view("old content"));
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Default actions in the child, as in a fresh process.
      for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGXFSZ, SIGUSR1})
        std::signal(s, SIG_DFL);
      gmp::write_file_atomically(path, [&](std::ostream& os) {
        os << std::string(300000, 'p') << std::flush;  // part of it on disk already
        ::raise(sig);
        os << "never";
      });
      ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("signal " << sig);
    // The process still died of the signal (the handler re-raised it with the default action).
    CHECK(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == sig);
    CHECK(gmp::read_file(path) == "old content");
    CHECK(dir.entries() == std::vector<std::string>{"keep.txt"});
  }
}

// Signals at random moments of back-to-back writes, in a process with a second thread that does
// not block them: while the writer blocks them (creating a temporary), the kernel hands the
// signal to that thread, whose handler must still find and remove the temporary. The count is
// GPUMEMPROF_INTERRUPT_SIGNALS (default 300); a tmpfs (/dev/shm) keeps fsync cheap, so most
// of each write is spent near the window.
TEST_CASE("atomic file: hundreds of signals at random times, some taken by another thread, leave no temporary") {
  const char* count_env = std::getenv("GPUMEMPROF_INTERRUPT_SIGNALS");
  const int signals = count_env != nullptr ? std::atoi(count_env) : 300;
  TempDir dir_owner(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "");
  const TempDir* dir = &dir_owner;
  const std::string path = dir->file("out.txt");
  gmp::write_file_atomically(path, std::string_view("old content"));
  std::mt19937 rng(20261126);
  std::uniform_int_distribution<int> delay_us(0, 3000);
  int interrupted = 0;
  std::vector<std::string> leftovers;
  for (int i = 0; i < signals; ++i) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) std::signal(s, SIG_DFL);
      std::thread idle([] {
        for (;;) ::pause();
      });
      idle.detach();
      try {
        for (long n = 0;; ++n) {
          gmp::write_file_atomically(path, [&](std::ostream& os) { os << "content " << n; });
          if (n == 0) (void)!::write(ready[1], "r", 1);
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    const int sig = i % 4 == 3 ? SIGTERM : SIGINT;
    ::kill(child, sig);
    // Every fifth try a second signal right behind the first (Ctrl-C twice, a job runner's SIGINT
    // then SIGTERM): it lands in the other thread while the first handler still removes the
    // temporary, and must not end the process before that is done.
    const int second = i % 5 == 4 ? (sig == SIGINT ? SIGTERM : SIGINT) : 0;
    if (second != 0) ::kill(child, second);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    interrupted += WIFSIGNALED(status) && (WTERMSIG(status) == sig || WTERMSIG(status) == second) ? 1 : 0;
    for (const std::string& name : dir->entries()) {
      if (name == "out.txt") continue;
      leftovers.push_back(name);
      ::unlink(dir->file(name).c_str());
    }
  }
  INFO(leftovers.size() << " temporaries left by " << signals << " signals, e.g. "
                        << (leftovers.empty() ? "" : leftovers.front()));
  CHECK(leftovers.empty());
  CHECK(interrupted == signals);
  CHECK(gmp::read_file(path).rfind("content ", 0) == 0);  // a whole write, never a torn one
}

TEST_CASE("atomic file: a program's own signal handler is left alone") {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGTERM, [](int) { ::_exit(42); });
    gmp::write_file_atomically(path, [&](std::ostream& os) {
      os << "partial" << std::flush;
      ::raise(SIGTERM);
    });
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 42));
  // That handler exited without cleaning up: the temporary stays, the target was never written.
  CHECK(dir.entries().size() == 1);
  CHECK(dir.entries()[0].find("out.txt.tmp-") == 0);
}

TEST_CASE("atomic file: an unwritable directory is an IoError naming the path; the old file stays") {
  TempDir dir;
  const std::string path = dir.file("snapshot.pickle");
  gmp::write_file_atomically(path, std::string_view("old snapshot"));
  LockedDirectory lock(dir.path());
  if (!lock.locked()) {
    WARN("cannot make a directory unwritable here (root without the immutable attribute): skipped");
    return;
  }
  const std::string msg = io_error_of([&] { gmp::write_snapshot_file(export_test::make_full_snapshot(), path); });
  CHECK(msg.find("cannot write '" + path + "'") != std::string::npos);
  CHECK(
      (msg.find("Permission denied") != std::string::npos || msg.find("Operation not permitted") != std::string::npos));
  CHECK(gmp::read_file(path) == "old snapshot");
  CHECK(dir.entries() == std::vector<std::string>{"snapshot.pickle"});
}

TEST_CASE("atomic file: other failures name the path and the reason") {
  TempDir dir;
  const std::string missing = dir.file("no/such/dir/out.pickle");
  std::string msg = io_error_of([&] { gmp::write_file_atomically(missing, std::string_view("x")); });
  CHECK(msg.find(missing) != std::string::npos);
  CHECK(msg.find("No such file or directory") != std::string::npos);

  // The target is a non-empty directory: the rename fails; the temporary is removed.
  const std::string target = dir.file("occupied");
  REQUIRE(::mkdir(target.c_str(), 0755) == 0);
  export_test::write_bytes(target + "/inside", "x");
  msg = io_error_of([&] { gmp::write_file_atomically(target, std::string_view("x")); });
  CHECK(msg.find("cannot write '" + target + "'") != std::string::npos);
  CHECK(msg.find("renaming") != std::string::npos);
  CHECK(dir.entries() == std::vector<std::string>{"occupied"});

  // A full device: the write itself fails and the reason comes from the system.
  if (::access("/dev/full", W_OK) == 0) {
    const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    {
      gmp::detail::FdStreambuf sink(fd);
      std::ostream os(&sink);
      CHECK_NOTHROW(os << std::string(100000, 'f') << std::flush);
      CHECK_FALSE(os.good());
      CHECK(sink.error() == ENOSPC);
    }
    ::close(fd);
  }

  msg = io_error_of([&] { (void)gmp::read_file(dir.file("absent")); });
  CHECK(msg.find("cannot read '" + dir.file("absent") + "': No such file or directory") != std::string::npos);
  msg = io_error_of([&] { (void)gmp::read_file(dir.path()); });
  CHECK(msg.find("Is a directory") != std::string::npos);
}
