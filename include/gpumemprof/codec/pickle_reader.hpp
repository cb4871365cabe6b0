// Layer 0 (codecs): a small, safe pickle reader (protocols 2..5) into DataValue.
//
// It runs the pickle machine for plain data only -- None, bool, int (64-bit), float, str,
// bytes, list, tuple, dict with str or int keys -- with every opcode CPython emits for those
// (memo ops, FRAME, MEMOIZE, LONG1/LONG4, BINUNICODE8, BINBYTES8, ...). Anything that would
// import or call code (GLOBAL, REDUCE, BUILD, ...) is refused, so reading a foreign file is
// safe. Every length is checked against the bytes left before anything is allocated, and a
// memo reference shares instead of copying, so memory stays proportional to the input.
//
// Input comes from memory or, in chunks, from a file (read_pickle_file), and the items of the
// lists under one key of the top-level dict can be streamed to a callback instead of being
// kept (PickleItemStream: how the snapshot reader reads a 10M-entry trace in bounded memory).
// Both paths run the same opcode loop. Streamed items that are dicts of str keys and plain
// values -- a trace entry as PyTorch and gpumemprof write it -- can be handed over flat
// (on_flat_item), without building the dict: pickle_flat_item-inl.hpp, which falls back to the
// opcode loop at the first opcode it does not expect.
//
// Why "sealing": a container becomes immutable once placed inside another. CPython's
// pickles of acyclic data never modify a container after that, and with the rule no input
// can build a cycle (which would leak and send readers into endless loops).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumemprof/codec/data_value.hpp"
#include "gpumemprof/codec/flat_item.hpp"
#include "gpumemprof/codec/pickle_opcodes.hpp"
#include "gpumemprof/codec/utf8.hpp"
#include "gpumemprof/config.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Limits of read_pickle.
struct PickleReadOptions {
  /// Deepest nesting of containers accepted (a snapshot needs 7).
  std::uint32_t max_depth = 256;
};

/// Streams the items of the lists held by one key of the top-level dict (a dict whose `key`
/// maps to a list of lists, as a snapshot's "device_traces"): each item is handed to `on_item`
/// (list index, item index, value) when the pickle appends it, and then dropped, so the lists
/// stay empty in the result. A pickle that builds those lists some other way (LIST opcode) is
/// read as usual. With on_flat_item, an item that is a dict of str keys and scalar, str or
/// memo-held list values goes there instead of to on_item, as a FlatItem (the same keys and
/// values, no dict built); any other item still goes to on_item, in order.
struct PickleItemStream {
  std::string_view key;
  std::function<void(std::size_t list, std::size_t item, const DataValue& value)> on_item;
  std::function<void(std::size_t list, std::size_t item, const FlatItem& value)> on_flat_item;
};

namespace detail {

/// The bytes of a pickle: all in memory, or read from a file in chunks (a view returned by
/// take() stays valid until the next take()).
class PickleInput {
 public:
  explicit PickleInput(std::string_view data) noexcept : buf_(data.data()), len_(data.size()), total_(data.size()) {}
  /// `total`: the file's size; reading past it or a shorter file is reported as truncation.
  PickleInput(std::FILE* file, std::uint64_t total) : total_(total), file_(file) {}

  [[nodiscard]] std::uint64_t offset() const noexcept { return base_ + pos_; }
  [[nodiscard]] std::uint64_t left() const noexcept { return total_ - offset(); }
  /// The next byte without taking it, or -1 at the end.
  int peek() {
    if (left() == 0) return -1;
    if (len_ == pos_) refill(1);
    return static_cast<std::uint8_t>(buf_[pos_]);
  }
  /// n bytes; the caller has checked n <= left().
  const char* take(std::size_t n) {
    if (len_ - pos_ < n) refill(n);
    const char* p = buf_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  static constexpr std::size_t kChunk = std::size_t{1} << 20;
  void refill(std::size_t n) {
    const std::size_t keep = len_ - pos_;
    if (keep != 0) std::memmove(own_.data(), own_.data() + pos_, keep);
    if (own_.size() < std::max(n, kChunk)) own_.resize(std::max(n, kChunk));
    base_ += pos_;
    pos_ = 0;
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(own_.size() - keep, total_ - base_ - keep));
    std::size_t got = 0;
    while (got < want) {
      const std::size_t r = std::fread(own_.data() + keep + got, 1, want - got, file_);
      if (r == 0) break;
      got += r;
    }
    buf_ = own_.data();
    len_ = keep + got;
    if (len_ < n) {
      throw FormatError(std::string(std::ferror(file_) != 0 ? "read error: " : "file shorter than expected: ") +
                        std::to_string(len_) + " bytes at offset " + std::to_string(base_) + ", needed " +
                        std::to_string(n));
    }
  }

  const char* buf_ = nullptr;
  std::size_t len_ = 0;  // bytes valid at buf_
  std::size_t pos_ = 0;  // next byte, from buf_
  std::uint64_t base_ = 0;
  std::uint64_t total_ = 0;
  std::FILE* file_ = nullptr;
  std::string own_;
};

/// The pickle virtual machine, restricted to plain data (see the header comment).
class PickleMachine {
 public:
  PickleMachine(PickleInput& in, const PickleReadOptions& options, const PickleItemStream* stream = nullptr)
      : in_(in), max_depth_(options.max_depth), stream_(stream) {}

  DataValue run() {
    while (true) {
      op_at_ = in_.offset();
      const std::uint8_t code = u8();
      code_ = code;
      switch (code) {
        case op::PROTO: {
          const std::uint8_t version = u8();
          if (version > 5) fail("unsupported pickle protocol " + std::to_string(version));
          break;
        }
        case op::FRAME: {
          const std::uint64_t n = le(8);
          if (n > in_.left())
            fail("truncated pickle: a FRAME of " + std::to_string(n) + " bytes runs past the end of the data");
          break;  // frames only group opcodes; nothing to do
        }
        case op::STOP: {
          if (stack_.size() <= fence()) fail("STOP with an empty stack");
          return stack_.back();
        }

        case op::MARK: marks_.push_back(stack_.size()); break;
        case op::POP: (void)pop(); break;
        case op::POP_MARK: stack_.resize(pop_mark()); break;
        case op::DUP: push(DataValue(top())); break;

        case op::NONE: push(DataValue()); break;
        case op::NEWTRUE: push(DataValue::boolean(true)); break;
        case op::NEWFALSE: push(DataValue::boolean(false)); break;
        case op::BININT: push(DataValue::integer(static_cast<std::int32_t>(le(4)))); break;
        case op::BININT1: push(DataValue::integer(u8())); break;
        case op::BININT2: push(DataValue::integer(static_cast<std::int64_t>(le(2)))); break;
        case op::LONG1: push(DataValue::integer(long_int(u8()))); break;
        case op::LONG4: {
          const auto n = static_cast<std::int32_t>(le(4));
          if (n < 0) fail("LONG4 with a negative length");
          push(DataValue::integer(long_int(static_cast<std::size_t>(n))));
          break;
        }
        case op::BINFLOAT: {
          const std::uint64_t bits = be8();
          double v = 0;
          std::memcpy(&v, &bits, sizeof v);
          push(DataValue::floating(v));
          break;
        }

        case op::SHORT_BINUNICODE: push(DataValue::string(text(u8()))); break;
        case op::BINUNICODE: push(DataValue::string(text(le(4)))); break;
        case op::BINUNICODE8: push(DataValue::string(text(le(8)))); break;
        // Python 2's str at protocols 1..2; Python 3 reads it as str (ASCII by default).
        case op::SHORT_BINSTRING: push(DataValue::string(text(u8()))); break;
        case op::BINSTRING: {
          const auto n = static_cast<std::int32_t>(le(4));
          if (n < 0) fail("BINSTRING with a negative length");
          push(DataValue::string(text(static_cast<std::uint64_t>(n))));
          break;
        }
        case op::SHORT_BINBYTES: push(DataValue::bytes(std::string(take(u8())))); break;
        case op::BINBYTES: push(DataValue::bytes(std::string(take(le(4))))); break;
        case op::BINBYTES8:
        case op::BYTEARRAY8: push(DataValue::bytes(std::string(take(le(8))))); break;

        case op::EMPTY_LIST:
          push(DataValue::list());
          if (stream_ != nullptr) note_list();
          break;
        case op::EMPTY_DICT:
          if (stream_ != nullptr && stream_->on_flat_item && flat_item()) break;
          push(DataValue::dict());
          break;
        case op::EMPTY_TUPLE: push(DataValue::tuple()); break;
        case op::LIST: {
          const std::size_t mark = pop_mark();
          DataValue list = DataValue::list();
          for (std::size_t i = mark; i < stack_.size(); ++i) append(list, std::move(stack_[i]));
          stack_.resize(mark);
          push(std::move(list));
          break;
        }
        case op::TUPLE: make_tuple(pop_mark()); break;
        case op::TUPLE1: make_tuple(items_above(1)); break;
        case op::TUPLE2: make_tuple(items_above(2)); break;
        case op::TUPLE3: make_tuple(items_above(3)); break;
        case op::DICT: {
          const std::size_t mark = pop_mark();
          DataValue dict = DataValue::dict();
          set_items(dict, mark);
          push(std::move(dict));
          break;
        }
        case op::APPEND: {
          DataValue v = pop();
          if (Streamed* s = streamed(top())) {
            emit(*s, top(), v);
            break;
          }
          append(top(), std::move(v));
          break;
        }
        case op::APPENDS: {
          const std::size_t mark = pop_mark();
          DataValue& list = below(mark);
          if (Streamed* s = streamed(list)) {
            for (std::size_t i = mark; i < stack_.size(); ++i) emit(*s, list, stack_[i]);
            stack_.resize(mark);
            break;
          }
          if (list.is(DataValue::Kind::list)) grow(std::get<DataValue::SeqPtr>(list.v_)->items, stack_.size() - mark);
          for (std::size_t i = mark; i < stack_.size(); ++i) append(list, std::move(stack_[i]));
          stack_.resize(mark);
          break;
        }
        case op::SETITEM: {
          DataValue v = pop();
          DataValue k = pop();
          set_item(top(), std::move(k), std::move(v));
          break;
        }
        case op::SETITEMS: {
          const std::size_t mark = pop_mark();
          set_items(below(mark), mark);
          break;
        }

        case op::BINPUT: put(u8()); break;
        case op::LONG_BINPUT: put(le(4)); break;
        case op::MEMOIZE: put(memo_slot_.size() + sparse_.size()); break;
        case op::BINGET: get(u8()); break;
        case op::LONG_BINGET: get(le(4)); break;

        default: {
          if (const char* name = PickleOp::name(code)) {
            fail(std::string("unsupported opcode ") + name + " (" + hex(code) +
                 "): only None, bool, int, float, str, bytes, list, tuple and dict are read");
          }
          fail("invalid opcode " + hex(code));
        }
      }
    }
  }

 private:
  using op = PickleOp;

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("pickle: " + what + " at byte " + std::to_string(op_at_));
  }
  static std::string hex(std::uint8_t b) {
    static constexpr char kHex[] = "0123456789abcdef";
    return std::string("0x") + kHex[b >> 4] + kHex[b & 0xF];
  }

  // ---- input ----
  std::string_view take(std::uint64_t n) {
    if (n > in_.left()) {
      const char* name = PickleOp::name(code_);
      fail(std::string("truncated data in ") + (name ? name : "opcode") + " (needs " + std::to_string(n) + " bytes, " +
           std::to_string(in_.left()) + " left)");
    }
    return {in_.take(static_cast<std::size_t>(n)), static_cast<std::size_t>(n)};
  }
  std::uint8_t u8() {
    if (in_.left() == 0) {
      if (op_at_ == in_.offset()) fail("truncated pickle: no STOP opcode before the end of the data");
      (void)take(1);
    }
    return static_cast<std::uint8_t>(*in_.take(1));
  }
  std::uint64_t le(std::size_t n) {
    const std::string_view s = take(n);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < n; ++k) v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(s[k])) << (8 * k);
    return v;
  }
  std::uint64_t be8() {
    const std::string_view s = take(8);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < 8; ++k) v = (v << 8) | static_cast<std::uint8_t>(s[k]);
    return v;
  }
  std::string text(std::uint64_t n) {
    const std::string_view s = take(n);
    if (!is_valid_utf8(s, /*allow_surrogates=*/true)) fail("a string that is not valid UTF-8");
    return std::string(s);
  }
  // A little-endian two's-complement integer of n bytes that must fit in 64 bits.
  std::int64_t long_int(std::size_t n) {
    const std::string_view s = take(n);
    if (n == 0) return 0;
    const bool negative = (static_cast<std::uint8_t>(s[n - 1]) & 0x80U) != 0;
    for (std::size_t k = 8; k < n; ++k) {
      if (static_cast<std::uint8_t>(s[k]) != (negative ? 0xFFU : 0x00U))
        fail("an integer that does not fit in 64 bits");
    }
    std::uint64_t v = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t k = 0; k < n && k < 8; ++k) {
      v &= ~(std::uint64_t{0xFF} << (8 * k));
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(s[k])) << (8 * k);
    }
    const auto result = static_cast<std::int64_t>(v);
    // An unsigned 64-bit value past 2^63 (PyTorch writes a frame line of size_t(-1) with
    // compile_context) is kept as its 64-bit pattern: 2^64 - 1 reads as -1.
    if (n >= 8 && negative && result >= 0) fail("an integer that does not fit in 64 bits");
    return result;
  }

  // ---- stack ----
  std::size_t fence() const noexcept { return marks_.empty() ? 0 : marks_.back(); }
  void push(DataValue v) { stack_.push_back(std::move(v)); }
  DataValue pop() {
    if (stack_.size() <= fence()) fail("stack underflow");
    DataValue v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  DataValue& top() {
    if (stack_.size() <= fence()) fail("stack underflow");
    return stack_.back();
  }
  std::size_t pop_mark() {
    if (marks_.empty()) fail("no MARK to pop");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }
  // The object below a MARK (the list or dict that APPENDS/SETITEMS fill).
  DataValue& below(std::size_t mark) {
    if (mark == 0 || mark - 1 < fence()) fail("stack underflow");
    return stack_[mark - 1];
  }
  // Start index of the top n items (all above the current MARK).
  std::size_t items_above(std::size_t n) {
    if (stack_.size() < fence() + n) fail("stack underflow");
    return stack_.size() - n;
  }

  // ---- containers ----
  // Room for n more items, keeping geometric growth across batches.
  template <class Vec>
  static void grow(Vec& v, std::size_t n) {
    if (v.capacity() - v.size() < n) v.reserve(std::max(v.size() + n, 2 * v.capacity()));
  }
  // Checks and records that child goes inside parent (see "sealing" above).
  void adopt(DataValue& parent, std::uint32_t& parent_depth, const DataValue& child) {
    const std::uint32_t d = child.depth();
    if (d == 0) return;
    if (child.identity() == parent.identity()) fail("a container that contains itself");
    if (auto* seq = std::get_if<DataValue::SeqPtr>(&child.v_)) (*seq)->sealed = true;
    if (auto* map = std::get_if<DataValue::MapPtr>(&child.v_)) (*map)->sealed = true;
    if (d + 1 > max_depth_) fail("containers nested deeper than " + std::to_string(max_depth_) + " levels");
    if (d + 1 > parent_depth) parent_depth = d + 1;
  }
  void append(DataValue& list, DataValue v) {
    if (!list.is(DataValue::Kind::list)) fail(std::string("APPEND to a ") + to_string(list.kind()) + ", not a list");
    DataValue::Seq& seq = *std::get<DataValue::SeqPtr>(list.v_);
    if (seq.sealed) fail("a list modified after it was placed in another container");
    adopt(list, seq.depth, v);
    seq.items.push_back(std::move(v));
  }
  void set_item(DataValue& dict, DataValue key, DataValue v) {
    if (!dict.is(DataValue::Kind::dict)) fail(std::string("SETITEM on a ") + to_string(dict.kind()) + ", not a dict");
    DataValue::Map& map = *std::get<DataValue::MapPtr>(dict.v_);
    if (map.sealed) fail("a dict modified after it was placed in another container");
    if (!key.is(DataValue::Kind::string) && !key.is(DataValue::Kind::integer)) {
      fail(std::string("a dict key of type ") + to_string(key.kind()) + " (only str and int keys are read)");
    }
    adopt(dict, map.depth, v);
    map.set(std::move(key), std::move(v));
  }
  void set_items(DataValue& dict, std::size_t mark) {
    if ((stack_.size() - mark) % 2 != 0) fail("odd number of items for a dict");
    if (dict.is(DataValue::Kind::dict)) grow(std::get<DataValue::MapPtr>(dict.v_)->entries, (stack_.size() - mark) / 2);
    for (std::size_t i = mark; i < stack_.size(); i += 2)
      set_item(dict, std::move(stack_[i]), std::move(stack_[i + 1]));
    stack_.resize(mark);
  }
  void make_tuple(std::size_t from) {
    DataValue tuple = DataValue::tuple();
    DataValue::Seq& seq = *std::get<DataValue::SeqPtr>(tuple.v_);
    seq.items.reserve(stack_.size() - from);
    for (std::size_t i = from; i < stack_.size(); ++i) {
      adopt(tuple, seq.depth, stack_[i]);
      seq.items.push_back(std::move(stack_[i]));
    }
    seq.sealed = true;  // tuples are immutable anyway
    stack_.resize(from);
    push(std::move(tuple));
  }

  // ---- streamed lists (PickleItemStream) ----
  struct Streamed {
    const void* list;
    std::size_t index;
    std::size_t items = 0;
  };
  Streamed* streamed(const DataValue& list) {
    if (stream_ == nullptr) return nullptr;
    for (Streamed& s : streamed_) {
      if (s.list == list.identity()) return &s;
    }
    return nullptr;
  }
  // A list just pushed: the outer list when it is the value of the stream's key in the
  // top-level dict (root at the stack's bottom, the key at a key position above it), or one of
  // the lists inside when it is pushed onto the outer list or onto a sibling list before it.
  void note_list() {
    const std::size_t top = stack_.size() - 1;
    if (top == 0) return;
    if (outer_ == nullptr) {
      const DataValue& under = stack_[top - 1];
      if (under.is(DataValue::Kind::string) && under.as_string() == stream_->key &&
          stack_[0].is(DataValue::Kind::dict) && (top - 1) % 2 == 1) {
        outer_ = stack_[top].identity();
      }
      return;
    }
    // Only lists (siblings waiting for an APPENDS) may lie between the outer list and this one;
    // the list index is then the outer list's length plus those siblings.
    std::size_t p = top;
    while (p > 0 && stack_[p - 1].identity() != outer_) {
      if (!stack_[p - 1].is(DataValue::Kind::list)) return;
      --p;
    }
    if (p == 0) return;
    const std::size_t index = stack_[p - 1].size() + (top - p);
    streamed_.push_back(Streamed{stack_[top].identity(), index});
  }
  // Hands one item to the callback instead of appending it, then releases what the memo holds
  // of it: the item itself (a later reference to it is an error) and the lists and dicts directly
  // inside it (a later reference gets a released() stand-in with the memo index: PyTorch's
  // pickles hold a frames list per trace entry, which a later entry may share).
  void emit(Streamed& s, const DataValue& list, const DataValue& item) {
    if (std::get<DataValue::SeqPtr>(list.v_)->sealed) fail("a list modified after it was placed in another container");
    stream_->on_item(s.index, s.items++, item);
    release(item, kStreamedItem);
    if (item.is(DataValue::Kind::dict)) {
      for (const auto& [k, v] : item.entries()) release(v, v.is(DataValue::Kind::dict) ? kReleasedDict : kReleasedList);
    }
  }
  void release(const DataValue& v, std::uint32_t tombstone) {
    if (!v.is(DataValue::Kind::list) && !v.is(DataValue::Kind::dict)) return;
    const std::uint32_t m = v.memo_index();
    if (m == DataValue::kNoMemo || m >= memo_slot_.size()) return;
    if (const std::uint32_t slot = memo_slot_[m]; !is_tombstone(slot) && slot != kUnset) {
      memo_values_[slot - 1] = DataValue();
      free_values_.push_back(slot - 1);
    }
    memo_slot_[m] = tombstone;
  }

  // ---- streamed dicts read flat (pickle_flat_item-inl.hpp) ----
  // One key (a memo-held str) and its value as read, with what the opcode loop needs to rebuild
  // them when the flat reading gives up part way.
  // The key and value views themselves live in flat_keys_ / flat_values_ (handed over as they are).
  struct FlatPair {
    enum class From : std::uint8_t { scalar, text, memo };
    std::uint64_t key_memo = 0;
    From from = From::scalar;
    std::uint64_t value_memo = 0;  // From::memo: the memo index the value is under
    bool has_value = false;
    std::string text;  // From::text: an inline str
  };
  static constexpr std::size_t kMaxFlat = 32;                  // more keys: not a trace entry
  static constexpr std::uint64_t kNoIndex = ~std::uint64_t{0};
  bool flat_item();
  bool flat_value(FlatPair& pair, ValueView& v);
  bool flat_put_follows();
  void flat_fallback(std::size_t n, std::uint64_t own_memo, bool marked);

  // ---- memo ----
  // Dense indices (what picklers emit) map to slots of memo_values_ (4 bytes each, so a pickle
  // that memoizes every one of 10M streamed items costs 40 MB); any other index lives in a map,
  // so a huge index cannot make the reader allocate a huge vector.
  static constexpr std::uint32_t kUnset = 0;
  static constexpr std::uint32_t kStreamedItem = 0xFFFFFFFFU;
  static constexpr std::uint32_t kReleasedList = 0xFFFFFFFEU;
  static constexpr std::uint32_t kReleasedDict = 0xFFFFFFFDU;
  static constexpr std::size_t kMaxDense = 0xFFFFFFF0U;
  static bool is_tombstone(std::uint32_t slot) noexcept { return slot >= kReleasedDict; }
  void put(std::uint64_t index) {
    const DataValue& v = top();
    if (index < memo_slot_.size() || (index == memo_slot_.size() && sparse_.empty() && index < kMaxDense)) {
      if (index == memo_slot_.size()) memo_slot_.push_back(kUnset);
      std::uint32_t& slot = memo_slot_[index];
      if (slot == kUnset || is_tombstone(slot)) {
        if (!free_values_.empty()) {
          slot = free_values_.back() + 1;
          free_values_.pop_back();
        } else {
          memo_values_.emplace_back();
          slot = static_cast<std::uint32_t>(memo_values_.size());
        }
      }
      memo_values_[slot - 1] = v;
      v.set_memo_index(static_cast<std::uint32_t>(index));
    } else {
      sparse_[index] = v;
    }
  }
  void get(std::uint64_t index) {
    if (index < memo_slot_.size()) {
      const std::uint32_t slot = memo_slot_[index];
      if (slot == kStreamedItem) {
        fail("memo entry " + std::to_string(index) +
             " refers to a streamed list item (a trace entry), which this reader does not keep");
      }
      if (slot == kReleasedList || slot == kReleasedDict) {
        DataValue stub = slot == kReleasedList ? DataValue::list() : DataValue::dict();
        if (auto* q = std::get_if<DataValue::SeqPtr>(&stub.v_)) (*q)->sealed = (*q)->released = true;
        if (auto* d = std::get_if<DataValue::MapPtr>(&stub.v_)) (*d)->sealed = (*d)->released = true;
        stub.set_memo_index(static_cast<std::uint32_t>(index));
        push(std::move(stub));
        return;
      }
      if (slot != kUnset) {
        push(memo_values_[slot - 1]);
        return;
      }
    }
    const auto it = sparse_.find(index);
    if (it == sparse_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  PickleInput& in_;
  std::uint32_t max_depth_;
  const PickleItemStream* stream_;
  std::uint64_t op_at_ = 0;  // offset of the opcode being run (for messages)
  std::uint8_t code_ = 0;    // the opcode being run
  std::vector<DataValue> stack_;
  std::vector<std::size_t> marks_;
  std::vector<std::uint32_t> memo_slot_;  // memo index -> 1 + index into memo_values_, kUnset, or a tombstone
  std::vector<DataValue> memo_values_;
  std::vector<std::uint32_t> free_values_;
  std::unordered_map<std::uint64_t, DataValue> sparse_;
  const void* outer_ = nullptr;     // the list of streamed lists
  std::vector<Streamed> streamed_;  // the streamed lists, in order
  std::vector<FlatPair> flat_;      // the dict being read flat
  std::vector<std::string_view> flat_keys_;
  std::vector<ValueView> flat_values_;
  std::vector<DataValue> flat_held_;  // the lists and dicts its values refer to
};

}  // namespace detail

GPUMEMPROF_NAMESPACE_END

#include "gpumemprof/codec/pickle_flat_item-inl.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

/// Reads a pickle of plain data. Throws FormatError("pickle: <what> at byte <offset>") on an
/// unsupported opcode, truncated or inconsistent data, or nesting beyond options.max_depth.
[[nodiscard]] inline DataValue read_pickle(std::string_view data, const PickleReadOptions& options = {},
                                           const PickleItemStream* stream = nullptr) {
  detail::PickleInput in(data);
  return detail::PickleMachine(in, options, stream).run();
}

/// Like read_pickle, reading the open file `file` of `size` bytes in chunks of 1 MiB, so that
/// with a `stream` the input need not fit in memory at once.
[[nodiscard]] inline DataValue read_pickle_file(std::FILE* file, std::uint64_t size,
                                                const PickleReadOptions& options = {},
                                                const PickleItemStream* stream = nullptr) {
  detail::PickleInput in(file, size);
  return detail::PickleMachine(in, options, stream).run();
}

GPUMEMPROF_NAMESPACE_END
