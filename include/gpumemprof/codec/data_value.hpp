// Layer 0 (codecs): a generic data value -- what a pickle or JSON file holds once read (None, bool,
// int, float, str, bytes, list, tuple, dict) -- the input of the snapshot reader.
//
// Containers and strings are shared, as Python objects are: copying a DataValue copies a
// reference, and a value the pickle memo references many times exists once (identity()
// tells shared values apart, which is how the snapshot reader keeps shared frames shared).
// That also bounds memory by the input size however often a pickle repeats a reference.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail {
class PickleMachine;
}  // namespace detail

/// A None/bool/int/float/str/bytes/list/tuple/dict value. Accessors of the wrong kind throw
/// std::logic_error; check kind() first.
class DataValue {
 public:
  enum class Kind : std::uint8_t { none, boolean, integer, floating, string, bytes, list, tuple, dict };
  using Items = std::vector<DataValue>;
  using Entry = std::pair<DataValue, DataValue>;  // key (str or int), value
  using Entries = std::vector<Entry>;             // in insertion order, keys unique

  /// None.
  DataValue() noexcept = default;
  [[nodiscard]] static DataValue boolean(bool v) { return DataValue(Kind::boolean, Storage(v)); }
  [[nodiscard]] static DataValue integer(std::int64_t v) { return DataValue(Kind::integer, Storage(v)); }
  [[nodiscard]] static DataValue floating(double v) { return DataValue(Kind::floating, Storage(v)); }
  [[nodiscard]] static DataValue string(std::string v) {
    return DataValue(Kind::string, Storage(std::make_shared<const std::string>(std::move(v))));
  }
  [[nodiscard]] static DataValue bytes(std::string v) {
    return DataValue(Kind::bytes, Storage(std::make_shared<const std::string>(std::move(v))));
  }
  [[nodiscard]] static DataValue list(Items items = {}) { return sequence(Kind::list, std::move(items)); }
  [[nodiscard]] static DataValue tuple(Items items = {}) { return sequence(Kind::tuple, std::move(items)); }
  [[nodiscard]] static DataValue dict() { return DataValue(Kind::dict, Storage(std::make_shared<Map>())); }

  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  [[nodiscard]] bool is(Kind k) const noexcept { return kind_ == k; }
  [[nodiscard]] bool is_none() const noexcept { return kind_ == Kind::none; }

  [[nodiscard]] bool as_bool() const { return std::get<bool>(checked(Kind::boolean, "a bool")); }
  [[nodiscard]] std::int64_t as_int() const { return std::get<std::int64_t>(checked(Kind::integer, "an int")); }
  /// A float, or an int converted to double.
  [[nodiscard]] double as_double() const {
    if (kind_ == Kind::integer) return static_cast<double>(std::get<std::int64_t>(v_));
    return std::get<double>(checked(Kind::floating, "a float"));
  }
  /// The text of a str (UTF-8) or the bytes of a bytes value.
  [[nodiscard]] const std::string& as_string() const {
    if (kind_ != Kind::string && kind_ != Kind::bytes) wrong("a str or bytes");
    return *std::get<StrPtr>(v_);
  }
  /// The elements of a list or tuple.
  [[nodiscard]] const Items& items() const {
    if (kind_ != Kind::list && kind_ != Kind::tuple) wrong("a list or tuple");
    return std::get<SeqPtr>(v_)->items;
  }
  /// The items of a dict, in insertion order.
  [[nodiscard]] const Entries& entries() const {
    if (kind_ != Kind::dict) wrong("a dict");
    return std::get<MapPtr>(v_)->entries;
  }
  /// Elements of a list/tuple, items of a dict, 0 for scalars.
  [[nodiscard]] std::size_t size() const noexcept {
    if (kind_ == Kind::list || kind_ == Kind::tuple) return std::get<SeqPtr>(v_)->items.size();
    if (kind_ == Kind::dict) return std::get<MapPtr>(v_)->entries.size();
    return 0;
  }
  /// The value under a dict key; nullptr when absent or when this is not a dict.
  [[nodiscard]] const DataValue* find(std::string_view key) const { return find_key(KeyRef{false, 0, key}); }
  [[nodiscard]] const DataValue* find(std::int64_t key) const { return find_key(KeyRef{true, key, {}}); }

  /// The address of the shared string or container (equal for values the pickle memo shared),
  /// nullptr for None/bool/int/float.
  [[nodiscard]] const void* identity() const noexcept {
    if (const auto* s = std::get_if<StrPtr>(&v_)) return s->get();
    if (const auto* q = std::get_if<SeqPtr>(&v_)) return q->get();
    if (const auto* m = std::get_if<MapPtr>(&v_)) return m->get();
    return nullptr;
  }
  /// Nesting depth: 0 for scalars, 1 for a container of scalars (or empty), and so on.
  [[nodiscard]] std::uint32_t depth() const noexcept {
    if (const auto* q = std::get_if<SeqPtr>(&v_)) return (*q)->depth;
    if (const auto* m = std::get_if<MapPtr>(&v_)) return (*m)->depth;
    return 0;
  }

  /// The pickle memo index a reader stored this container under (kNoMemo: none, or a scalar).
  static constexpr std::uint32_t kNoMemo = 0xFFFFFFFFU;
  [[nodiscard]] std::uint32_t memo_index() const noexcept {
    if (const auto* q = std::get_if<SeqPtr>(&v_)) return (*q)->memo;
    if (const auto* m = std::get_if<MapPtr>(&v_)) return (*m)->memo;
    return kNoMemo;
  }

  /// A stand-in the streaming pickle reader gives for a memoized list or dict it released
  /// (PickleItemStream): empty, with the memo index of the value it stands for.
  [[nodiscard]] bool released() const noexcept {
    if (const auto* q = std::get_if<SeqPtr>(&v_)) return (*q)->released;
    if (const auto* m = std::get_if<MapPtr>(&v_)) return (*m)->released;
    return false;
  }

  /// Appends to a list (shared: every copy sees it). A container must not contain itself.
  void append(DataValue v) {
    if (kind_ != Kind::list) wrong("a list");
    Seq& seq = *std::get<SeqPtr>(v_);
    if (v.identity() == &seq) throw std::invalid_argument("DataValue: a list cannot contain itself");
    seq.depth = std::max(seq.depth, v.depth() + 1);
    seq.items.push_back(std::move(v));
  }
  /// Sets a dict item (key: a str or int); an existing key keeps its position and gets the
  /// new value, as in Python.
  void set(DataValue key, DataValue v) {
    if (kind_ != Kind::dict) wrong("a dict");
    if (key.kind_ != Kind::string && key.kind_ != Kind::integer) {
      throw std::invalid_argument(std::string("DataValue: a dict key must be a str or int, not ") +
                                  kind_name(key.kind_));
    }
    Map& map = *std::get<MapPtr>(v_);
    if (v.identity() == &map) throw std::invalid_argument("DataValue: a dict cannot contain itself");
    map.depth = std::max(map.depth, v.depth() + 1);
    map.set(std::move(key), std::move(v));
  }
  void set(std::string_view key, DataValue v) { set(string(std::string(key)), std::move(v)); }

 private:
  friend class detail::PickleMachine;

  // Records the memo index of a container (pickle reader).
  void set_memo_index(std::uint32_t index) const noexcept {
    if (const auto* q = std::get_if<SeqPtr>(&v_)) (*q)->memo = index;
    if (const auto* m = std::get_if<MapPtr>(&v_)) (*m)->memo = index;
  }

  struct Seq {
    Items items;
    std::uint32_t memo = kNoMemo;
    std::uint32_t depth = 1;
    bool sealed = false;  // pickle reader: placed inside another container, no longer mutable
    bool released = false;
  };
  // A dict key as the index sees it: the text of a str key (owned by the entry's shared,
  // immutable string) or an int.
  struct KeyRef {
    bool is_int = false;
    std::int64_t number = 0;
    std::string_view text;
    friend bool operator==(const KeyRef&, const KeyRef&) = default;
  };
  struct KeyRefHash {
    std::size_t operator()(const KeyRef& k) const noexcept {
      return k.is_int ? std::hash<std::int64_t>{}(k.number) ^ 0x5bd1e995U : std::hash<std::string_view>{}(k.text);
    }
  };
  struct Map {
    static constexpr std::size_t kIndexFrom = 16;  // smaller dicts are searched linearly
    Entries entries;
    std::unique_ptr<std::unordered_map<KeyRef, std::size_t, KeyRefHash>> index;
    std::uint32_t memo = kNoMemo;
    std::uint32_t depth = 1;
    bool sealed = false;
    bool released = false;

    static KeyRef ref(const DataValue& key) noexcept {
      if (key.kind_ == Kind::integer) return KeyRef{true, std::get<std::int64_t>(key.v_), {}};
      return KeyRef{false, 0, *std::get<StrPtr>(key.v_)};
    }
    DataValue* find(const KeyRef& k) {
      if (index) {
        const auto it = index->find(k);
        return it == index->end() ? nullptr : &entries[it->second].second;
      }
      for (Entry& e : entries) {
        if (ref(e.first) == k) return &e.second;
      }
      return nullptr;
    }
    // Assumes key is a str or int.
    void set(DataValue key, DataValue v) {
      if (DataValue* existing = find(ref(key))) {
        *existing = std::move(v);
        return;
      }
      entries.emplace_back(std::move(key), std::move(v));
      if (index) {
        index->emplace(ref(entries.back().first), entries.size() - 1);
      } else if (entries.size() >= kIndexFrom) {
        index = std::make_unique<std::unordered_map<KeyRef, std::size_t, KeyRefHash>>();
        for (std::size_t i = 0; i < entries.size(); ++i) index->emplace(ref(entries[i].first), i);
      }
    }
  };
  using StrPtr = std::shared_ptr<const std::string>;
  using SeqPtr = std::shared_ptr<Seq>;
  using MapPtr = std::shared_ptr<Map>;
  using Storage = std::variant<std::monostate, bool, std::int64_t, double, StrPtr, SeqPtr, MapPtr>;

  DataValue(Kind k, Storage v) : kind_(k), v_(std::move(v)) {}
  static DataValue sequence(Kind k, Items items) {
    auto seq = std::make_shared<Seq>();
    for (const DataValue& item : items) seq->depth = std::max(seq->depth, item.depth() + 1);
    seq->items = std::move(items);
    return DataValue(k, Storage(std::move(seq)));
  }
  const DataValue* find_key(const KeyRef& key) const {
    if (kind_ != Kind::dict) return nullptr;
    return std::get<MapPtr>(v_)->find(key);
  }
  const Storage& checked(Kind k, const char* what) const {
    if (kind_ != k) wrong(what);
    return v_;
  }
  [[noreturn]] void wrong(const char* what) const;
  static const char* kind_name(Kind k) noexcept;

  Kind kind_ = Kind::none;
  Storage v_;
};

/// Python's name of a kind: "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict".
[[nodiscard]] constexpr const char* to_string(DataValue::Kind k) noexcept {
  switch (k) {
    case DataValue::Kind::none: return "None";
    case DataValue::Kind::boolean: return "bool";
    case DataValue::Kind::integer: return "int";
    case DataValue::Kind::floating: return "float";
    case DataValue::Kind::string: return "str";
    case DataValue::Kind::bytes: return "bytes";
    case DataValue::Kind::list: return "list";
    case DataValue::Kind::tuple: return "tuple";
    case DataValue::Kind::dict: return "dict";
  }
  return "None";
}

inline const char* DataValue::kind_name(Kind k) noexcept { return to_string(k); }

inline void DataValue::wrong(const char* what) const {
  throw std::logic_error(std::string("DataValue: expected ") + what + ", have " + to_string(kind_));
}

GPUMEMPROF_NAMESPACE_END
