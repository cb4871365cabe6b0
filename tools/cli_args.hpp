// Tiny argument parsing for the gpumemprof CLI: positional arguments and --options.
// A usage mistake throws UsageError; main() prints it on one line and exits 2.
#pragma once

#include <sys/stat.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
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
  [[nodiscard]] std::string output_file(const std::string& option, const std::vector<std::string>& inputs) const {
    const std::string out = get(option);
    struct stat o {};
    if (out.empty() || ::stat(out.c_str(), &o) != 0) return out;
    for (const std::string& in : inputs) {
      struct stat i {};
      if (::stat(in.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino) {
        throw UsageError(option + " '" + out + "' is the input file '" + in +
                         "' (the same file); writing it would destroy the input: name another output file");
      }
    }
    return out;
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
