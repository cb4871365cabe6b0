// Layer 0 (codecs): the streaming pickle reader's flat path (PickleItemStream::on_flat_item), part of
// PickleMachine (pickle_reader.hpp).
//
// A trace entry is a dict of about eight str keys -- after the first entry, memo references --
// and ints, strs and a memo-held frames list. The opcode loop builds a shared dict, a shared key
// and a variant per item for it and then throws them away; here the dict's opcodes are read
// straight into a FlatItem instead. The first opcode that does not fit that shape (a new list, a
// nested dict, a key that is not a memo-held str, a memo slot being rebound) hands everything
// read so far to the opcode loop as the values it would have built -- the dict, its MARK, the
// pairs -- and the loop goes on from that opcode, so any pickle reads as before.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "gpumemprof/codec/pickle_reader.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

// Called at EMPTY_DICT. Returns false (nothing read) unless the dict is an item of a streamed
// list being filled by APPENDS; else reads it, flat or through flat_fallback, and returns true.
inline bool PickleMachine::flat_item() {
  if (marks_.empty()) return false;
  const std::size_t mark = marks_.back();
  if (mark == 0 || mark - 1 < (marks_.size() >= 2 ? marks_[marks_.size() - 2] : 0)) return false;
  if (!stack_[mark - 1].is(DataValue::Kind::list) || streamed(stack_[mark - 1]) == nullptr) return false;
  if (flat_.empty()) {
    flat_.resize(kMaxFlat);
    flat_keys_.resize(kMaxFlat);
    flat_values_.resize(kMaxFlat);
    flat_held_.reserve(kMaxFlat);  // never reallocated: views point into it
  }
  flat_held_.clear();
  // The dict's own memo index (CPython memoizes every dict): reserved now, as the loop would.
  std::uint64_t own = kNoIndex;
  if (flat_put_follows()) {
    op_at_ = in_.offset();
    code_ = u8();
    own = code_ == op::MEMOIZE ? memo_slot_.size() + sparse_.size() : code_ == op::BINPUT ? u8() : le(4);
    if (own != memo_slot_.size() || !sparse_.empty() || own >= kMaxDense) {
      flat_fallback(0, own, false);
      return true;
    }
    memo_slot_.push_back(kStreamedItem);
  }
  if (in_.peek() != op::MARK) {
    flat_fallback(0, own, false);
    return true;
  }
  op_at_ = in_.offset();
  (void)u8();
  std::size_t n = 0;
  for (;;) {
    op_at_ = in_.offset();
    const int c = in_.peek();
    if (c == op::SETITEMS) {
      code_ = u8();
      break;
    }
    if (n == kMaxFlat || (c != op::BINGET && c != op::LONG_BINGET)) {
      flat_fallback(n, own, true);
      return true;
    }
    FlatPair& p = flat_[n];
    ValueView& v = flat_values_[n];
    flat_keys_[n] = std::string_view();
    ++n;
    code_ = u8();
    p.key_memo = c == op::BINGET ? u8() : le(4);
    p.has_value = false;
    const std::uint32_t slot = p.key_memo < memo_slot_.size() ? memo_slot_[p.key_memo] : kUnset;
    if (slot == kUnset || is_tombstone(slot) || !memo_values_[slot - 1].is(DataValue::Kind::string) ||
        !flat_value(p, v)) {
      flat_fallback(n, own, true);
      return true;
    }
    flat_keys_[n - 1] = memo_values_[slot - 1].as_string();
  }
  DataValue& list = stack_[mark - 1];
  Streamed& s = *streamed(list);
  // Items the loop read before this one go first, in order.
  for (std::size_t i = mark; i < stack_.size(); ++i) emit(s, list, stack_[i]);
  stack_.resize(mark);
  if (std::get<DataValue::SeqPtr>(list.v_)->sealed) fail("a list modified after it was placed in another container");
  stream_->on_flat_item(s.index, s.items++, FlatItem{n, flat_keys_.data(), flat_values_.data()});
  // As emit(): the lists and dicts directly inside are released from the memo.
  for (const DataValue& held : flat_held_) {
    release(held, held.is(DataValue::Kind::dict) ? kReleasedDict : kReleasedList);
  }
  flat_held_.clear();
  return true;
}

// Whether the next opcode stores into the memo.
inline bool PickleMachine::flat_put_follows() {
  const int c = in_.peek();
  return c == op::MEMOIZE || c == op::BINPUT || c == op::LONG_BINPUT;
}

// Reads one value into `p`; false when it is not one of the plain kinds (then p.has_value says
// whether an opcode was read, for flat_fallback to rebuild).
inline bool PickleMachine::flat_value(FlatPair& p, ValueView& v) {
  op_at_ = in_.offset();
  const int c = in_.peek();
  v = ValueView{};
  p.from = FlatPair::From::scalar;
  switch (c) {
    case op::BININT1: code_ = u8(); v.kind = DataValue::Kind::integer; v.integer = u8(); break;
    case op::BININT2: code_ = u8(); v.kind = DataValue::Kind::integer; v.integer = static_cast<std::int64_t>(le(2)); break;
    case op::BININT: code_ = u8(); v.kind = DataValue::Kind::integer; v.integer = static_cast<std::int32_t>(le(4)); break;
    case op::LONG1: code_ = u8(); v.kind = DataValue::Kind::integer; v.integer = long_int(u8()); break;
    case op::NONE: code_ = u8(); break;
    case op::NEWTRUE:
    case op::NEWFALSE: code_ = u8(); v.kind = DataValue::Kind::boolean; v.integer = c == op::NEWTRUE ? 1 : 0; break;
    case op::BINFLOAT: {
      code_ = u8();
      const std::uint64_t bits = be8();
      std::memcpy(&v.floating, &bits, sizeof v.floating);
      v.kind = DataValue::Kind::floating;
      break;
    }
    case op::SHORT_BINUNICODE:
    case op::BINUNICODE: {
      code_ = u8();
      p.text = text(c == op::SHORT_BINUNICODE ? u8() : le(4));
      p.from = FlatPair::From::text;
      v.kind = DataValue::Kind::string;
      p.has_value = true;
      if (in_.peek() == op::MEMOIZE && sparse_.empty() && memo_slot_.size() < kMaxDense) {
        // A str seen for the first time (an action, a site): the memo keeps it for later entries.
        op_at_ = in_.offset();
        code_ = u8();
        p.value_memo = memo_slot_.size();
        push(DataValue::string(std::move(p.text)));
        put(p.value_memo);
        v.text = top().as_string();  // the memo's copy, which outlives the pop
        stack_.pop_back();
        p.from = FlatPair::From::memo;
      } else {
        v.text = p.text;
      }
      return !flat_put_follows();
    }
    case op::BINGET:
    case op::LONG_BINGET: {
      code_ = u8();
      p.value_memo = c == op::BINGET ? u8() : le(4);
      p.from = FlatPair::From::memo;
      p.has_value = true;  // from here on the loop's get() rebuilds it (or reports it)
      const std::uint32_t slot = p.value_memo < memo_slot_.size() ? memo_slot_[p.value_memo] : kUnset;
      if (slot == kReleasedList) {
        v.kind = DataValue::Kind::list;
        v.released = true;
        v.memo = static_cast<std::uint32_t>(p.value_memo);
      } else if (slot == kUnset || is_tombstone(slot)) {
        return false;
      } else if (const DataValue& m = memo_values_[slot - 1]; m.depth() == 0) {
        v = ValueView::of(m);  // a str (or a scalar someone memoized): the memo keeps it alive
      } else {
        flat_held_.push_back(m);
        v = ValueView::of(flat_held_.back());
      }
      return !flat_put_follows();
    }
    default: return false;
  }
  p.has_value = true;
  return !flat_put_follows();
}

// Gives up reading flat: pushes what the opcode loop would have built from the opcodes read so
// far -- the dict (stored under its memo index), its MARK, the first n keys and their values.
inline void PickleMachine::flat_fallback(std::size_t n, std::uint64_t own_memo, bool marked) {
  push(DataValue::dict());
  if (own_memo != kNoIndex) put(own_memo);
  if (marked) marks_.push_back(stack_.size());
  for (std::size_t i = 0; i < n; ++i) {
    FlatPair& p = flat_[i];
    get(p.key_memo);
    if (!p.has_value) continue;
    const ValueView& v = flat_values_[i];
    switch (p.from) {
      case FlatPair::From::memo: get(p.value_memo); break;
      case FlatPair::From::text: push(DataValue::string(std::move(p.text))); break;
      case FlatPair::From::scalar:
        switch (v.kind) {
          case DataValue::Kind::integer: push(DataValue::integer(v.integer)); break;
          case DataValue::Kind::boolean: push(DataValue::boolean(v.integer != 0)); break;
          case DataValue::Kind::floating: push(DataValue::floating(v.floating)); break;
          default: push(DataValue()); break;
        }
        break;
    }
  }
  flat_held_.clear();
}

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
