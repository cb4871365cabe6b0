// Layer 0 (codecs): a dict read without building a dict -- its str keys and its values as plain views, in
// pickle order. The streaming pickle reader hands a snapshot's trace entries over this way
// (PickleItemStream::on_flat_item): a million entries then cost no dict, no key string and no
// shared value each. ValueView is also how the snapshot decoder looks at a DataValue, so both
// paths decode an entry with the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpumemprof/codec/data_value.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// One value seen without copying it: a scalar, a str (text), or a list/dict held elsewhere.
/// Valid while the item it belongs to is being handed over (or while the DataValue lives).
struct ValueView {
  DataValue::Kind kind = DataValue::Kind::none;
  std::int64_t integer = 0;               ///< int, or bool as 0/1
  double floating = 0;                    ///< float
  std::string_view text;                  ///< str or bytes
  const DataValue* container = nullptr;   ///< list, tuple or dict (nullptr for a released list)
  std::uint32_t memo = DataValue::kNoMemo;  ///< the pickle memo index of a container
  bool released = false;  ///< a list the streaming reader already released (see DataValue::released)

  [[nodiscard]] bool is(DataValue::Kind k) const noexcept { return kind == k; }

  [[nodiscard]] static ValueView of(const DataValue& v) {
    ValueView out;
    out.kind = v.kind();
    switch (v.kind()) {
      case DataValue::Kind::none: break;
      case DataValue::Kind::boolean: out.integer = v.as_bool() ? 1 : 0; break;
      case DataValue::Kind::integer: out.integer = v.as_int(); break;
      case DataValue::Kind::floating: out.floating = v.as_double(); break;
      case DataValue::Kind::string:
      case DataValue::Kind::bytes: out.text = v.as_string(); break;
      case DataValue::Kind::list:
      case DataValue::Kind::tuple:
      case DataValue::Kind::dict:
        out.container = &v;
        out.memo = v.memo_index();
        out.released = v.released();
        break;
    }
    return out;
  }
};

/// The items of one dict with str keys, in the order the pickle set them (a key set twice
/// appears twice; the later one wins, as in Python).
struct FlatItem {
  std::size_t size = 0;
  const std::string_view* keys = nullptr;
  const ValueView* values = nullptr;
};

GPUMEMPROF_NAMESPACE_END
