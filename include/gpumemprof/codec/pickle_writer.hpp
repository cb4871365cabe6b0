// Layer 0 (codecs): a streaming pickle writer limited to what PyTorch's browser memory viewer reads.
//
// Opcodes are a subset of tools/check_snapshot.py's VIEWER_OPS: PROTO, FRAME (protocol 4),
// MARK, EMPTY_DICT/LIST/TUPLE, TUPLE/TUPLE1..3, SETITEMS, APPENDS, BININT1/BININT2/BININT/
// LONG1, BINFLOAT, NEWTRUE/NEWFALSE, NONE, SHORT_BINUNICODE (protocol 4)/BINUNICODE,
// MEMOIZE (protocol 4) or BINPUT/LONG_BINPUT (protocol 2), BINGET/LONG_BINGET, STOP.
// Layout follows CPython: dict items and list elements in MARK ... SETITEMS/APPENDS batches
// of 1000, protocol-4 output cut into FRAMEs of about 64 KiB at opcode boundaries.
//
// Memo: dict keys (a small vocabulary in every file we write) are written once and then
// referenced by content, like CPython's interned strings; other values are shared through
// reuse()/remember() (a frames list written once, referenced by every entry that has it).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gpumemprof/codec/output_buffer.hpp"
#include "gpumemprof/codec/pickle_opcodes.hpp"
#include "gpumemprof/codec/utf8.hpp"
#include "gpumemprof/codec/value_writer.hpp"
#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

inline std::uint64_t load_u64(const char* p) noexcept {
  std::uint64_t w = 0;
  std::memcpy(&w, p, 8);
  return w;
}
inline std::uint32_t load_u32(const char* p) noexcept {
  std::uint32_t w = 0;
  std::memcpy(&w, p, 4);
  return w;
}

/// a[0, n) == b[0, n), inlined for the short strings of dict keys.
[[nodiscard]] inline bool same_bytes(const char* a, const char* b, std::size_t n) noexcept {
  if (n >= 8 && n <= 16) return load_u64(a) == load_u64(b) && load_u64(a + n - 8) == load_u64(b + n - 8);
  if (n >= 4 && n < 8) return load_u32(a) == load_u32(b) && load_u32(a + n - 4) == load_u32(b + n - 4);
  if (n < 4) {
    for (std::size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  return std::memcmp(a, b, n) == 0;
}

/// A quick 64-bit hash of a short byte string (dict keys). The tail is read with overlapping
/// fixed-size loads: a variable-length copy would stall on store forwarding, per key.
[[nodiscard]] inline std::uint64_t hash_bytes(std::string_view s) noexcept {
  constexpr std::uint64_t kMul = 0xFF51AFD7ED558CCDULL;
  const char* p = s.data();
  const std::size_t n = s.size();
  std::uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
  const auto mix = [&](std::uint64_t w) {
    h = (h ^ w) * kMul;
    h ^= h >> 32;
  };
  if (n >= 8) {
    std::size_t i = 0;
    for (; i + 8 < n; i += 8) mix(load_u64(p + i));
    mix(load_u64(p + n - 8));
  } else if (n >= 4) {
    mix(load_u32(p) | (static_cast<std::uint64_t>(load_u32(p + n - 4)) << 32));
  } else if (n > 0) {
    mix(static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) |
        (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8) |
        (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16));
  }
  h *= 0xC4CEB9FE1A85EC53ULL;
  return h ^ (h >> 29);
}

/// Open-addressing map from addresses to memo indices (what remember() stored).
class AddressMemo {
 public:
  [[nodiscard]] const std::uint32_t* find(const void* key) const noexcept {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key) return &slots_[i].index;
      if (slots_[i].key == nullptr) return nullptr;
    }
  }
  /// Adds or replaces key (never nullptr).
  void insert(const void* key, std::uint32_t index) {
    if (2 * (used_ + 1) > slots_.size()) rehash(slots_.empty() ? 64 : 2 * slots_.size());
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash(key) & mask;
    while (slots_[i].key != nullptr && slots_[i].key != key) i = (i + 1) & mask;
    if (slots_[i].key == nullptr) ++used_;
    slots_[i] = {key, index};
  }

 private:
  struct Slot {
    const void* key = nullptr;
    std::uint32_t index = 0;
  };
  static std::size_t hash(const void* p) noexcept {
    auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    x = (x ^ (x >> 31)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(x ^ (x >> 29));
  }
  void rehash(std::size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    used_ = 0;
    for (const Slot& s : old) {
      if (s.key != nullptr) insert(s.key, s.index);
    }
  }
  std::vector<Slot> slots_;
  std::size_t used_ = 0;
};

/// Dict keys already written, by content, with their memo indices. Bounded: past kMaxKeys
/// distinct keys the writer stops interning (a file with that many is not a key vocabulary).
class KeyMemo {
 public:
  static constexpr std::size_t kMaxKeys = 4096;

  /// The 1-based id of key, or 0 when it was not interned.
  [[nodiscard]] std::uint32_t find(std::string_view key, std::uint64_t h) const noexcept {
    if (slots_.empty()) return 0;
    const std::size_t mask = kSlots - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id == 0) return 0;
      if (s.hash == h && s.size == key.size() && same_bytes(keys_[s.id - 1].data(), key.data(), key.size()))
        return s.id;
    }
  }
  [[nodiscard]] bool full() const noexcept { return keys_.size() >= kMaxKeys; }
  void insert(std::string_view key, std::uint64_t h, std::uint32_t memo_index) {
    if (slots_.empty()) slots_.assign(kSlots, Slot{});
    keys_.emplace_back(key);
    memo_.push_back(memo_index);
    const std::size_t mask = kSlots - 1;
    std::size_t i = h & mask;
    while (slots_[i].id != 0) i = (i + 1) & mask;
    slots_[i] = {h, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(key.size())};
  }
  [[nodiscard]] std::uint32_t memo_index(std::uint32_t id) const noexcept { return memo_[id - 1]; }
  [[nodiscard]] const std::string& key(std::uint32_t id) const noexcept { return keys_[id - 1]; }
  [[nodiscard]] bool empty() const noexcept { return keys_.empty(); }

 private:
  static constexpr std::size_t kSlots = 2 * kMaxKeys;  // load factor <= 1/2, no rehash
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t id = 0;
    std::uint32_t size = 0;
  };
  std::vector<Slot> slots_;
  std::vector<std::string> keys_;
  std::vector<std::uint32_t> memo_;
};

}  // namespace detail

/// Writes one value as a pickle to a std::ostream. Call finish() after the top-level value.
/// Integers beyond 2^53 in magnitude throw std::invalid_argument (the browser viewer reads
/// integers as JavaScript numbers); invalid UTF-8 in strings is replaced by U+FFFD.
class PickleWriter final : public ValueWriter {
 public:
  /// The largest integer magnitude written: 2^53 = 9007199254740992.
  static constexpr std::uint64_t kMaxInteger = std::uint64_t{1} << 53;
  /// Items per MARK ... SETITEMS/APPENDS batch (CPython's _BATCHSIZE).
  static constexpr std::uint32_t kBatchSize = 1000;
  /// Target size of a protocol-4 frame, in bytes (CPython's _FRAME_SIZE_TARGET).
  static constexpr std::size_t kFrameSize = 64 * 1024;

  /// protocol: 4 (default: framing, MEMOIZE, SHORT_BINUNICODE) or 2.
  explicit PickleWriter(std::ostream& out, int protocol = 4) : out_(out), protocol_(protocol), buf_(kFrameSize) {
    if (protocol != 2 && protocol != 4) {
      throw std::invalid_argument("PickleWriter: protocol must be 2 or 4 (what PyTorch's memory viewer reads), got " +
                                  std::to_string(protocol));
    }
  }
  PickleWriter(const PickleWriter&) = delete;
  PickleWriter& operator=(const PickleWriter&) = delete;
  ~PickleWriter() override = default;

  [[nodiscard]] int protocol() const noexcept { return protocol_; }
  /// Bytes handed to the stream so far (the whole pickle once finish() returned).
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return written_; }

 private:
  using op = detail::PickleOp;

  enum class Open : std::uint8_t { list, dict, tuple };
  struct Level {
    Open kind = Open::list;
    bool awaiting_value = false;   // dict: key() was written, its value not yet
    std::uint32_t count = 0;       // list/dict: items in the open batch; tuple: items
    std::size_t mark_pos = 0;      // tuple: buffer offset of its MARK
    std::uint64_t mark_frame = 0;  // tuple: the frame holding that MARK
  };

  // ---- containers and keys ----
  void do_begin_dict() override { begin(Open::dict, op::EMPTY_DICT); }
  void do_begin_list() override { begin(Open::list, op::EMPTY_LIST); }
  void do_end_dict() override { end(Open::dict, op::SETITEMS, "end_dict"); }
  void do_end_list() override { end(Open::list, op::APPENDS, "end_list"); }

  void do_begin_tuple() override {
    before_value();
    room(1);
    open_.push_back(Level{Open::tuple, false, 0, buf_.size(), frame_no_});
    buf_.put(static_cast<char>(op::MARK));
    can_remember_ = false;
  }
  void do_end_tuple() override {
    check_top(Open::tuple, "end_tuple");
    const Level l = open_.back();
    open_.pop_back();
    // Like CPython, small tuples use EMPTY_TUPLE/TUPLE1..3 and no MARK: drop the MARK while it
    // is still in the buffer (it is, unless a frame was committed meanwhile).
    if (l.count <= 3 && l.mark_frame == frame_no_) {
      buf_.erase(l.mark_pos, 1);
      static constexpr std::uint8_t kSmall[] = {op::EMPTY_TUPLE, op::TUPLE1, op::TUPLE2, op::TUPLE3};
      emit(kSmall[l.count]);
    } else {
      emit(op::TUPLE);
    }
    after_value();
  }

  void do_key(std::string_view k) override {
    if (open_.empty() || open_.back().kind != Open::dict) throw std::logic_error("PickleWriter: key() outside a dict");
    Level& l = open_.back();
    if (l.awaiting_value) throw std::logic_error("PickleWriter: key() where the previous key's value is expected");
    open_batch(l, op::SETITEMS);
    l.awaiting_value = true;
    can_remember_ = false;
    const std::uint64_t h = detail::hash_bytes(k);
    if (const std::uint32_t id = keys_.find(k, h); id != 0) {
      last_key_id_ = id;
      emit_get(keys_.memo_index(id));
      return;
    }
    write_string(k);
    if (!keys_.full() && memo_count_ < kMemoLimit) {
      keys_.insert(k, h, emit_put());
      last_key_id_ = keys_.find(k, h);
    } else {
      last_key_id_ = 0;
      overflow_key_.assign(k);
    }
  }

  // ---- scalars ----
  void do_int(std::int64_t v) override {
    before_value();
    write_int(v);
    after_value();
  }
  void do_uint(std::uint64_t v) override {
    if (v > kMaxInteger) too_large(std::to_string(v));
    do_int(static_cast<std::int64_t>(v));
  }
  void do_double(double v) override {
    before_value();
    room(9);
    buf_.put(static_cast<char>(op::BINFLOAT));
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int k = 7; k >= 0; --k) buf_.put(static_cast<char>((bits >> (8 * k)) & 0xFFU));  // big-endian
    after_value();
  }
  void do_bool(bool v) override {
    before_value();
    emit(v ? op::NEWTRUE : op::NEWFALSE);
    after_value();
  }
  void do_string(std::string_view v) override {
    before_value();
    write_string(v);
    after_value();
  }
  void do_null() override {
    before_value();
    emit(op::NONE);
    after_value();
  }

  // ---- memo ----
  bool do_reuse(const void* key) override {
    if (key == nullptr) return false;
    const std::uint32_t* index = memo_.find(key);
    if (index == nullptr) return false;
    before_value();
    emit_get(*index);
    after_value();
    return true;
  }
  void do_remember(const void* key) override {
    if (!can_remember_) throw std::logic_error("PickleWriter: remember() must directly follow the value it names");
    if (key == nullptr || memo_count_ >= kMemoLimit) return;
    memo_.insert(key, emit_put());
  }

  void do_finish() override {
    if (!open_.empty() || !root_done_)
      throw std::logic_error("PickleWriter: finish() before the top-level value is complete");
    if (finished_) return;
    emit(op::STOP);
    commit();
    out_.flush();
    if (!out_) throw IoError("writing to the output stream failed");
    finished_ = true;
  }

  // ---- structure bookkeeping ----
  void begin(Open kind, std::uint8_t opcode) {
    before_value();
    emit(opcode);
    open_.push_back(Level{kind, false, 0, 0, 0});
    can_remember_ = false;
  }
  void end(Open kind, std::uint8_t batch_op, const char* what) {
    check_top(kind, what);
    if (open_.back().awaiting_value) throw std::logic_error("PickleWriter: end_dict() right after a key");
    if (open_.back().count != 0) emit(batch_op);
    open_.pop_back();
    after_value();
  }
  void check_top(Open kind, const char* what) const {
    if (open_.empty() || open_.back().kind != kind) {
      throw std::logic_error(std::string("PickleWriter: ") + what + "() does not match the open container");
    }
  }
  // Starts the next item of a list or dict: the batch is closed lazily (when the next item
  // comes), so that the value just completed is still on top of the pickle stack for remember().
  void open_batch(Level& l, std::uint8_t batch_op) {
    if (l.count == kBatchSize) {
      emit(batch_op);
      l.count = 0;
    }
    if (l.count == 0) emit(op::MARK);
    ++l.count;
  }
  void before_value() {
    if (open_.empty()) {
      if (root_done_) throw std::logic_error("PickleWriter: a pickle holds one top-level value");
      return;
    }
    Level& l = open_.back();
    switch (l.kind) {
      case Open::dict:
        if (!l.awaiting_value) throw std::logic_error("PickleWriter: a dict value needs key() first");
        l.awaiting_value = false;
        break;
      case Open::list: open_batch(l, op::APPENDS); break;
      case Open::tuple: ++l.count; break;
    }
  }
  void after_value() noexcept {
    can_remember_ = true;
    if (open_.empty()) root_done_ = true;
  }

  // ---- encodings ----
  void write_int(std::int64_t v) {
    constexpr auto kMax = static_cast<std::int64_t>(kMaxInteger);
    if (v > kMax || v < -kMax) too_large(std::to_string(v));
    if (v >= 0 && v < 0x100) {
      room(2);
      buf_.put(static_cast<char>(op::BININT1));
      buf_.put(static_cast<char>(v));
    } else if (v >= 0 && v < 0x10000) {
      room(3);
      buf_.put(static_cast<char>(op::BININT2));
      buf_.put_le(static_cast<std::uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
      room(5);
      buf_.put(static_cast<char>(op::BININT));
      buf_.put_le(static_cast<std::uint64_t>(v), 4);
    } else {
      // LONG1: the fewest little-endian two's-complement bytes that hold v (5..7 here).
      std::size_t n = 5;
      while (n < 8 && (v >= (std::int64_t{1} << (8 * n - 1)) || v < -(std::int64_t{1} << (8 * n - 1)))) ++n;
      room(2 + n);
      buf_.put(static_cast<char>(op::LONG1));
      buf_.put(static_cast<char>(n));
      buf_.put_le(static_cast<std::uint64_t>(v), n);
    }
  }
  void write_string(std::string_view s) {
    detail::with_valid_utf8(s, [this](std::string_view text) { write_utf8(text); });
  }
  void write_utf8(std::string_view s) {
    if (protocol_ >= 4 && s.size() < 0x100) {
      room(2 + s.size());
      buf_.put(static_cast<char>(op::SHORT_BINUNICODE));
      buf_.put(static_cast<char>(s.size()));
    } else {
      if (s.size() > 0xFFFFFFFFU) throw std::invalid_argument("PickleWriter: string longer than 4 GiB");
      room(5 + s.size());
      buf_.put(static_cast<char>(op::BINUNICODE));
      buf_.put_le(static_cast<std::uint64_t>(s.size()), 4);
    }
    buf_.append(s.data(), s.size());
  }
  void emit_get(std::uint32_t index) {
    if (index < 0x100) {
      room(2);
      buf_.put(static_cast<char>(op::BINGET));
      buf_.put(static_cast<char>(index));
    } else {
      room(5);
      buf_.put(static_cast<char>(op::LONG_BINGET));
      buf_.put_le(index, 4);
    }
  }
  // Stores the top of the pickle stack in the next memo slot; returns its index.
  std::uint32_t emit_put() {
    const std::uint32_t index = memo_count_++;
    if (protocol_ >= 4) {
      emit(op::MEMOIZE);
    } else if (index < 0x100) {
      room(2);
      buf_.put(static_cast<char>(op::BINPUT));
      buf_.put(static_cast<char>(index));
    } else {
      room(5);
      buf_.put(static_cast<char>(op::LONG_BINPUT));
      buf_.put_le(index, 4);
    }
    return index;
  }
  [[noreturn]] void too_large(const std::string& digits) const {
    std::string where;
    if (last_key_id_ != 0) {
      where = " (last key: '" + keys_.key(last_key_id_) + "')";
    } else if (!overflow_key_.empty()) {
      where = " (last key: '" + overflow_key_ + "')";
    }
    throw std::invalid_argument("PickleWriter: integer " + digits + where +
                                " exceeds 2^53 in magnitude; PyTorch's memory viewer reads integers as "
                                "JavaScript numbers, exact only up to 2^53");
  }

  // ---- bytes ----
  void emit(std::uint8_t opcode) {
    room(1);
    buf_.put(static_cast<char>(opcode));
  }
  // Called at opcode boundaries only, so a committed frame never splits an opcode.
  void room(std::size_t n) {
    if (GPUMEMPROF_LIKELY(buf_.fits(n))) return;
    commit();
    buf_.grow_for(n);
  }
  void commit() {
    if (!started_) {
      const char proto[2] = {static_cast<char>(op::PROTO), static_cast<char>(protocol_)};
      detail::write_bytes(out_, proto, 2);
      written_ += 2;
      started_ = true;
    }
    if (buf_.size() == 0) return;
    if (protocol_ >= 4 && buf_.size() >= 4) {  // CPython leaves tiny tails unframed too
      char header[9];
      header[0] = static_cast<char>(op::FRAME);
      for (std::size_t k = 0; k < 8; ++k) header[1 + k] = static_cast<char>((buf_.size() >> (8 * k)) & 0xFFU);
      detail::write_bytes(out_, header, 9);
      written_ += 9;
    }
    detail::write_bytes(out_, buf_.data(), buf_.size());
    written_ += buf_.size();
    buf_.clear();
    ++frame_no_;
  }

  static constexpr std::uint32_t kMemoLimit = std::numeric_limits<std::uint32_t>::max();

  std::ostream& out_;
  int protocol_;
  detail::ByteBuffer buf_;
  std::vector<Level> open_;
  detail::AddressMemo memo_;
  detail::KeyMemo keys_;
  std::uint32_t memo_count_ = 0;
  std::uint32_t last_key_id_ = 0;
  std::string overflow_key_;
  std::uint64_t frame_no_ = 0;
  std::uint64_t written_ = 0;
  bool started_ = false;
  bool root_done_ = false;
  bool can_remember_ = false;
  bool finished_ = false;
};

GPUMEMPROF_NAMESPACE_END
