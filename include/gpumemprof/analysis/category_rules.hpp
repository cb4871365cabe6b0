// Analysis layer: categories for untagged memory, from its stack frames and the annotated ranges
// (scopes) open when it was allocated -- so snapshots that carry no categories (PyTorch's own, or
// code without memory_category scopes) still split by category.
//
// A rules file has one rule a line, tried in order (the first that matches names the category);
// blank lines and lines starting with '#' are skipped:
//
//   # CATEGORY  frame|scope  PATTERN            (PATTERN: an ECMAScript regular expression)
//   parameter        frame  Linear::Linear
//   optimizer_state  frame  torch/optim/
//   activation       scope  ^forward$
//
// `frame` matches any frame of the allocation's stack ("NAME FILE:LINE"); `scope` matches the name
// of any annotated range open at the allocation's time. The pattern is the rest of the line after
// the second field. An entry whose user_metadata names a category keeps it: rules only fill in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpumemprof/analysis/annotated_ranges.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"
#include "gpumemprof/history/snapshot.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

class CategoryRules {
 public:
  /// Parses rules (see the header comment); `source` names them in errors (a path). A bad line
  /// throws ConfigError naming `source:LINE`, what is wrong and how to write it.
  static CategoryRules parse(std::string_view text, const std::string& source = "rules") {
    CategoryRules out;
    std::istringstream in{std::string(text)};
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const std::size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      std::istringstream fields(line);
      Rule r;
      std::string kind;
      fields >> r.category >> kind;
      std::string pattern;
      std::getline(fields, pattern);
      pattern.erase(0, pattern.find_first_not_of(" \t"));
      while (!pattern.empty() && (pattern.back() == ' ' || pattern.back() == '\t')) pattern.pop_back();
      const std::string where = source + ":" + std::to_string(number);
      if (kind != "frame" && kind != "scope") {
        throw ConfigError(where + ": expected 'CATEGORY frame|scope PATTERN', got '" + line + "'");
      }
      if (pattern.empty()) throw ConfigError(where + ": the rule for '" + r.category + "' has no pattern");
      r.scope = kind == "scope";
      r.text = pattern;
      try {
        r.pattern = std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
      } catch (const std::regex_error& e) {
        throw ConfigError(where + ": bad pattern '" + pattern + "' (" + e.what() +
                          "); write an ECMAScript regular expression, e.g. Linear::Linear or ^forward$");
      }
      out.rules_.push_back(std::move(r));
    }
    return out;
  }

  /// Reads a rules file; IoError when it cannot be read, ConfigError for a bad line.
  static CategoryRules load(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw IoError("cannot read the rules file '" + path + "'");
    std::ostringstream text;
    text << f.rdbuf();
    return parse(text.str(), path);
  }

  [[nodiscard]] bool empty() const noexcept { return rules_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return rules_.size(); }

  /// Fixes the annotated ranges of `device` that `scope` rules look at.
  void set_scopes(const std::vector<Annotation>& annotations, int device) {
    ranges_ = annotated_ranges(annotations, device);
  }

  /// The category of memory allocated by `frames` in trace entry number `index`, at `time_us`
  /// ("" = no rule matches). A scope holds the entry by the recorder's order where the snapshot
  /// keeps it (AnnotatedRange::holds).
  [[nodiscard]] std::string category_for(const Frames& frames, std::size_t index, std::int64_t time_us) const {
    // The first frame rule a stack matches, once per distinct stack (entries share stacks).
    std::size_t frame_rule = rules_.size();
    if (frames) {
      const auto [it, added] = by_stack_.try_emplace(frames.get(), rules_.size());
      if (added) {
        keep_.push_back(frames);  // the key must not be reused by another stack
        for (std::size_t i = 0; i < rules_.size() && it->second == rules_.size(); ++i) {
          if (rules_[i].scope) continue;
          for (const Frame& f : *frames) {
            const std::string text = f.name + " " + f.filename + ":" + std::to_string(f.line);
            if (std::regex_search(text, rules_[i].pattern)) {
              it->second = i;
              break;
            }
          }
        }
      }
      frame_rule = it->second;
    }
    for (std::size_t i = 0; i < frame_rule; ++i) {  // scope rules before it come first
      if (!rules_[i].scope) continue;
      for (const AnnotatedRange& g : ranges_) {
        if (g.holds(index, time_us) && std::regex_search(g.name, rules_[i].pattern)) return rules_[i].category;
      }
    }
    return frame_rule < rules_.size() ? rules_[frame_rule].category : std::string();
  }

 private:
  struct Rule {
    std::string category;
    bool scope = false;
    std::string text;
    std::regex pattern;
  };
  std::vector<Rule> rules_;
  std::vector<AnnotatedRange> ranges_;
  mutable std::unordered_map<const void*, std::size_t> by_stack_;  // stack -> first frame rule matched
  mutable std::vector<Frames> keep_;
};

GPUMEMPROF_NAMESPACE_END
