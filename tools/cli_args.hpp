// Tiny argument parsing for the gpumemprof CLI: positional arguments and --options.
// A usage mistake throws UsageError; main() prints it on one line and exits 2.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace gpumemprof::tools {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  /// `flags`: options without a value; `valued`: options that take one ("--device sim:0" or
  /// "--device=sim:0"). Short aliases map to long names, e.g. {"-o", "--output"}.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags, const std::set<std::string>& valued,
       const std::map<std::string, std::string>& aliases = {}) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h") a = "--help";  // every command takes -h for --help
      if (auto it = aliases.find(a); it != aliases.end()) a = it->second;
      if (a.size() > 2 && a.rfind("--", 0) == 0) {
        std::string value;
        const auto eq = a.find('=');
        const bool has_eq = eq != std::string::npos;
        const std::string name = has_eq ? a.substr(0, eq) : a;
        if (flags.count(name) != 0) {
          if (has_eq) throw UsageError("option " + name + " takes no value");
          options_[name] = "1";
        } else if (valued.count(name) != 0) {
          if (has_eq) {
            value = a.substr(eq + 1);
          } else if (i + 1 < argc) {
            value = argv[++i];
          } else {
            throw UsageError("option " + name + " needs a value");
          }
          options_[name] = value;
        } else {
          throw UsageError("unknown option " + name);
        }
      } else {
        positional_.push_back(a);
      }
    }
  }
  [[nodiscard]] bool has(const std::string& name) const { return options_.count(name) != 0; }
  [[nodiscard]] std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = options_.find(name);
    return it == options_.end() ? fallback : it->second;
  }
  /// The option's value as a count in [0, max] (`fallback` when absent); anything else is a
  /// UsageError naming the option.
  [[nodiscard]] std::size_t count(const std::string& name, std::size_t fallback,
                                  std::size_t max = 999'999'999'999) const {
    if (!has(name)) return fallback;
    const std::string v = get(name);
    if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos || std::stoull(v) > max) {
      throw UsageError(name + " takes a number from 0 to " + std::to_string(max) + ", got '" + v + "'");
    }
    return std::stoull(v);
  }
  /// The path given to `option`, the file a command writes ("" when the option is absent). Every
  /// command that writes a file takes its path from here: an output that is one of `inputs` --
  /// the same file by any path, hard link or symbolic link -- is a UsageError, so an input is
  /// never replaced. An output that does not exist yet is none of them.
  /// The path is also checked before any input is read, so a mistake costs no time: an empty
  /// path, an existing directory, a missing folder or one this user cannot write into is a
  /// UsageError at once (issue 29: these failed only after the whole report was built).
  [[nodiscard]] std::string output_file(const std::string& option, const std::vector<std::string>& inputs) const {
    const std::string out = get(option);
    if (!has(option)) return out;
    check_writable_path(option, out);
    struct stat o {};
    if (::stat(out.c_str(), &o) != 0) return out;
    for (const std::string& in : inputs) {
      struct stat i {};
      if (::stat(in.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino) {
        throw UsageError(option + " '" + out + "' is the input file '" + in +
                         "' (the same file); writing it would destroy the input: name another output file");
      }
    }
    return out;
  }
  /// Throws a UsageError when a file cannot be written at `out` (given to `option`).
  static void check_writable_path(const std::string& option, const std::string& out) {
    if (out.empty()) throw UsageError(option + " '': an empty path; name the file to write");
    struct stat st {};
    if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      throw UsageError(option + " '" + out + "' is a directory; name a file to write (a path inside it)");
    }
    const auto slash = out.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : out.substr(0, slash);
    // An unnamed file in the folder (O_TMPFILE) asks the file system itself -- read-only mounts
    // and root's rights included -- and leaves nothing behind; access() where it is not supported.
    int err = 0;
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
    } else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
      if (::access(dir.c_str(), W_OK | X_OK) != 0) err = errno;
    } else {
      err = errno;
    }
    if (err == 0) return;
    std::string why = std::generic_category().message(err);
    if (err == ENOENT) why = "the folder '" + dir + "' does not exist; create it first";
    if (err == ENOTDIR) why = "'" + dir + "' is not a folder";
    if (err == EACCES || err == EPERM || err == EROFS) {
      why = "cannot write into the folder '" + dir + "' (" + std::generic_category().message(err) +
            "); name a file in a folder you can write";
    }
    throw UsageError(option + " '" + out + "': " + why);
  }
  [[nodiscard]] const std::vector<std::string>& positional() const { return positional_; }
  /// Exactly `n` positional arguments, else a UsageError naming `what`.
  void expect_positional(std::size_t n, const std::string& what) const {
    if (positional_.size() != n) {
      throw UsageError("expected " + what + (positional_.size() > n ? ", got extra arguments" : ""));
    }
  }

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
};

}  // namespace gpumemprof::tools
