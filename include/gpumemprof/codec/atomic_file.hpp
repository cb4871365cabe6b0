// Layer 0 (codecs): files written all-or-nothing, and whole files read back.
//
// A snapshot or report is written to a temporary file in the target's directory, flushed
// and fsync'ed, then renamed over the target: readers see the old file or the complete new
// one, never a torn mix, and a failure (full disk, no permission, an exception while
// producing the content) leaves the old file untouched and no temporary behind. SIGINT,
// SIGTERM, SIGHUP, SIGQUIT, SIGPIPE and the other terminating signals while a file is being
// written (Ctrl-C during a long export) remove the temporary too: a handler, installed only where the signal's action
// is the default, unlinks every registered temporary and re-raises the signal with its default action. POSIX only
// (open/fsync/rename), like the rest of the toolkit.
#pragma once

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// The system's text for errno value err (thread-safe, unlike strerror).
[[nodiscard]] inline std::string errno_text(int err) { return std::generic_category().message(err); }

/// A std::streambuf over a file descriptor that remembers the first write error (errno)
/// instead of losing it inside std::ostream.
class FdStreambuf final : public std::streambuf {
 public:
  explicit FdStreambuf(int fd) : fd_(fd), buffer_(new char[kSize]) { setp(buffer_.get(), buffer_.get() + kSize); }
  FdStreambuf(const FdStreambuf&) = delete;
  FdStreambuf& operator=(const FdStreambuf&) = delete;
  ~FdStreambuf() override = default;

  /// errno of the first failed write, 0 when none failed.
  [[nodiscard]] int error() const noexcept { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // Large writes skip the buffer.
    if (n >= static_cast<std::streamsize>(kSize)) {
      if (!drain() || !write_all(s, static_cast<std::size_t>(n))) return 0;
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  static constexpr std::size_t kSize = 64 * 1024;

  bool drain() {
    const auto n = static_cast<std::size_t>(pptr() - pbase());
    setp(buffer_.get(), buffer_.get() + kSize);
    return n == 0 || write_all(buffer_.get(), n);
  }
  bool write_all(const char* p, std::size_t n) {
    if (error_ != 0) return false;
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }

  int fd_;
  std::unique_ptr<char[]> buffer_;
  int error_ = 0;
};

/// The signals whose default action ends the process and that a terminal, a job runner or the
/// system sends to stop a program (SIGPIPE: stderr or stdout piped into a reader that quit;
/// SIGXFSZ/SIGXCPU: a ulimit): a temporary file must not outlive them.
inline constexpr int kTerminatingSignals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGPIPE,
                                              SIGALRM, SIGXCPU, SIGXFSZ, SIGUSR1, SIGUSR2};

/// Temporary files being written now, for the signal handler. Fixed-size and lock-free, so the
/// handler does only async-signal-safe work: atomic loads, unlink, sched_yield, sigaction, raise.
///
/// A name is claimed (kClaimed) *before* its file is created and becomes kLive once it exists;
/// the writer blocks the terminating signals from claim to live, so its own thread cannot run
/// the handler in between. Another thread can (a process-directed signal goes to any thread
/// that does not block it, e.g. a CUDA runtime thread): its handler waits for claimed names to
/// settle, then unlinks every live one. Nothing is ever created before it is claimed.
class TempFileRegistry {
 public:
  static constexpr std::size_t kSlots = 32;
  static constexpr std::size_t kMaxPath = 1024;

  /// Claims a slot for `path`, which the caller creates next and then passes to live() (or
  /// release() when creating failed). Returns kSlots when none is free or the path is too long
  /// (the file is then still removed on exceptions, only not on signals). Call with the
  /// terminating signals blocked.
  static std::size_t claim(const std::string& path) noexcept {
    if (path.size() >= kMaxPath) return kSlots;
    install_handlers();
    for (std::size_t i = 0; i < kSlots; ++i) {
      int expected = kFree;
      if (slots()[i].state.compare_exchange_strong(expected, kClaimed)) {
        // A handler running in another thread has begun removing the temporaries: the process
        // is ending; create nothing more (its signal cannot reach this thread, which blocks it).
        if (terminating_.load()) {
          slots()[i].state.store(kFree);
          for (;;) ::pause();
        }
        std::memcpy(slots()[i].path, path.c_str(), path.size() + 1);
        return i;
      }
    }
    return kSlots;
  }
  /// The claimed file exists now: a signal removes it.
  static void live(std::size_t slot) noexcept {
    if (slot < kSlots) slots()[slot].state.store(kLive, std::memory_order_release);
  }
  /// Frees the slot (the file was renamed or removed, or never created).
  static void release(std::size_t slot) noexcept {
    if (slot < kSlots) slots()[slot].state.store(kFree, std::memory_order_release);
  }

 private:
  enum : int { kFree = 0, kClaimed = 1, kLive = 2 };
  // A claimer needs a few system calls to settle; one that is stuck (a hung file system) must
  // not hang the exit: the wait ends after about ten seconds of yields and short sleeps.
  static constexpr int kMaxSpins = 1 << 14;
  static constexpr int kMaxSleeps = 10000;
  struct Slot {
    std::atomic<int> state{kFree};
    char path[kMaxPath];
  };
  static inline std::atomic<bool> terminating_{false};  // set by the handler, never cleared
  static Slot* slots() noexcept {
    static Slot table[kSlots];  // constant-initialised: no guard, safe to touch from a handler
    return table;
  }

  /// Unlinks every registered temporary (async-signal-safe), for a process about to end: no
  /// temporary is created after it began, and a name another thread is creating right now is
  /// waited for (a few system calls at most), then removed.
  static void unlink_all() noexcept {
    // Sequentially consistent with claim(): a claimer either sees the flag and stops, or its
    // claim is seen below and waited for.
    terminating_.store(true);
    for (std::size_t i = 0; i < kSlots; ++i) {
      int state = slots()[i].state.load();
      for (int waits = 0; state == kClaimed && waits < kMaxSpins + kMaxSleeps; ++waits) {
        if (waits < kMaxSpins) {
          (void)::sched_yield();
        } else {
          const struct timespec ms { 0, 1000000 };
          (void)::nanosleep(&ms, nullptr);  // the claimer may be descheduled on a busy machine
        }
        state = slots()[i].state.load();
      }
      if (state == kLive) ::unlink(slots()[i].path);
    }
  }

  // Every terminating signal stays blocked in this thread while the handler runs (sa_mask), and
  // the action stays ours until the temporaries are gone: a second signal (Ctrl-C twice, SIGINT
  // then SIGTERM) taken by another thread meanwhile runs this handler there too, instead of the
  // default action ending the process before the unlinks. Then the default action comes back and
  // the signal is raised again: the process ends as the signal would have ended it.
  static void on_signal(int sig) {
    unlink_all();
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    (void)::sigaction(sig, &dfl, nullptr);
    ::raise(sig);  // pending until the handler returns and unblocks it
  }

  // Checked at every registration (four sigaction calls, nothing next to writing a file): a
  // program may reset a signal to its default action at any time, e.g. in a forked child.
  static void install_handlers() noexcept {
    for (const int sig : kTerminatingSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
        continue;  // the program handles (or ignores) this signal itself, or it is ours already
      }
      struct sigaction act {};
      act.sa_handler = &TempFileRegistry::on_signal;
      sigemptyset(&act.sa_mask);
      for (const int other : kTerminatingSignals) sigaddset(&act.sa_mask, other);
      act.sa_flags = SA_RESTART;
      (void)::sigaction(sig, &act, nullptr);
    }
  }
};

/// Blocks the terminating signals in this thread while alive (a signal that arrives meanwhile
/// is delivered when the guard ends, or to another thread).
class TerminatingSignalsBlocked {
 public:
  TerminatingSignalsBlocked() noexcept {
    sigset_t block;
    sigemptyset(&block);
    for (const int sig : kTerminatingSignals) sigaddset(&block, sig);
    ::pthread_sigmask(SIG_BLOCK, &block, &saved_);
  }
  ~TerminatingSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  TerminatingSignalsBlocked(const TerminatingSignalsBlocked&) = delete;
  TerminatingSignalsBlocked& operator=(const TerminatingSignalsBlocked&) = delete;

 private:
  sigset_t saved_{};
};

[[noreturn]] inline void throw_io(std::string_view verb, const std::string& path, int err, std::string_view step = {}) {
  std::string msg = "cannot ";
  msg.append(verb).append(" '").append(path).append("': ").append(errno_text(err));
  if (!step.empty()) msg.append(" (").append(step).append(")");
  throw IoError(msg);
}

/// The directory part of path ("." when there is none).
[[nodiscard]] inline std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// Creates a fresh temporary file next to path, registered for removal on signals from before
/// it exists: returns its descriptor and sets tmp_path and slot. Call with the terminating
/// signals blocked (TerminatingSignalsBlocked).
inline int create_temporary(const std::string& path, std::string& tmp_path, std::size_t& slot) {
  static std::atomic<unsigned> counter{0};
  const auto stamp = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int attempt = 0;; ++attempt) {
    tmp_path = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" +
               std::to_string(stamp % 1000000007ULL);
    slot = TempFileRegistry::claim(tmp_path);
    // 0666 lets the umask decide, as for any new file (mkstemp would force 0600).
    const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      TempFileRegistry::live(slot);
      return fd;
    }
    const int err = errno;
    TempFileRegistry::release(std::exchange(slot, TempFileRegistry::kSlots));
    if (err != EEXIST || attempt >= 100) {
      throw_io("write", path, err, "creating a temporary file in '" + parent_directory(path) + "'");
    }
  }
}

}  // namespace detail

/// Writes the file at `path` atomically: `produce(std::ostream&)` writes the content into a
/// temporary file in the same directory, which is then fsync'ed and renamed over `path`.
/// Throws IoError (naming the path and the system's reason) when the file cannot be
/// written; an exception from `produce` propagates unchanged. Either way the old file, if
/// any, is left intact and the temporary file is removed. An existing file's permission
/// bits are kept; a symbolic link at `path` is replaced by the new file.
template <class Produce>
void write_file_atomically(const std::string& path, Produce&& produce) {
  std::string tmp;
  struct Registration {
    std::size_t slot = detail::TempFileRegistry::kSlots;
    ~Registration() { detail::TempFileRegistry::release(slot); }
  } registration;
  int fd = -1;
  {
    // The terminating signals wait in this thread while the temporary is claimed, created and
    // registered; another thread that takes one waits for the name to settle (unlink_all).
    const detail::TerminatingSignalsBlocked blocked;
    fd = detail::create_temporary(path, tmp, registration.slot);
  }
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0) (void)::fchmod(fd, old.st_mode & 07777);

  const auto abandon = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(tmp.c_str());
  };
  try {
    detail::FdStreambuf sink(fd);
    {
      std::ostream os(&sink);
      try {
        produce(os);
      } catch (const IoError&) {
        // A stream failure surfaces as a generic IoError from the writer; name the cause.
        if (sink.error() != 0) detail::throw_io("write", path, sink.error());
        throw;
      }
      os.flush();
    }
    if (sink.error() != 0) detail::throw_io("write", path, sink.error());
    if (::fsync(fd) != 0) detail::throw_io("write", path, errno, "fsync");
    const int closing = fd;
    fd = -1;
    if (::close(closing) != 0) detail::throw_io("write", path, errno, "close");
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      detail::throw_io("write", path, err, "renaming '" + tmp + "' over it");
    }
    // The name is the target's now; the slot is freed once (another writer may take it next).
    detail::TempFileRegistry::release(std::exchange(registration.slot, detail::TempFileRegistry::kSlots));
  } catch (...) {
    abandon();
    throw;
  }
  // Make the rename itself durable; a failure here loses nothing already visible.
  const int dir = ::open(detail::parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

/// Writes `contents` to `path` atomically (see the overload above).
inline void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(
      path, [&](std::ostream& os) { os.write(contents.data(), static_cast<std::streamsize>(contents.size())); });
}

/// The whole content of the file at `path`. Throws IoError naming the path and the reason.
[[nodiscard]] inline std::string read_file(const std::string& path) {
  constexpr std::size_t kReadChunk = 64 * 1024;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) detail::throw_io("read", path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) detail::throw_io("read", path, errno);
  if (S_ISDIR(st.st_mode)) detail::throw_io("read", path, EISDIR);
  std::string data;
  if (S_ISREG(st.st_mode) && st.st_size > 0) data.reserve(static_cast<std::size_t>(st.st_size));
  const std::unique_ptr<char[]> chunk(new char[kReadChunk]);
  for (;;) {
    const ::ssize_t n = ::read(fd, chunk.get(), kReadChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::throw_io("read", path, errno);
    }
    if (n == 0) break;
    data.append(chunk.get(), static_cast<std::size_t>(n));
  }
  return data;
}

GPUMEMPROF_NAMESPACE_END
