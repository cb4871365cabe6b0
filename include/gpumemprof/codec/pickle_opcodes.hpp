// Layer 0 (codecs): the pickle machine's opcodes (CPython's Lib/pickletools.py), one list that
// gives both the byte values and the names used in error messages.
#pragma once

#include <cstdint>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// Opcode bytes as PickleOp::NAME; PickleOp::name(byte) for messages.
struct PickleOp {
// X(name, byte): every opcode of protocols 0..5.
// clang-format off
#define GPUMEMPROF_PICKLE_OPCODES(X)                                                            \
  X(MARK, 0x28) X(STOP, 0x2E) X(POP, 0x30) X(POP_MARK, 0x31) X(DUP, 0x32) X(FLOAT, 0x46)        \
  X(INT, 0x49) X(BININT, 0x4A) X(BININT1, 0x4B) X(LONG, 0x4C) X(BININT2, 0x4D) X(NONE, 0x4E)    \
  X(PERSID, 0x50) X(BINPERSID, 0x51) X(REDUCE, 0x52) X(STRING, 0x53) X(BINSTRING, 0x54)         \
  X(SHORT_BINSTRING, 0x55) X(UNICODE, 0x56) X(BINUNICODE, 0x58) X(APPEND, 0x61) X(BUILD, 0x62)  \
  X(GLOBAL, 0x63) X(DICT, 0x64) X(EMPTY_DICT, 0x7D) X(APPENDS, 0x65) X(GET, 0x67)              \
  X(BINGET, 0x68) X(INST, 0x69) X(LONG_BINGET, 0x6A) X(LIST, 0x6C) X(EMPTY_LIST, 0x5D)          \
  X(OBJ, 0x6F) X(PUT, 0x70) X(BINPUT, 0x71) X(LONG_BINPUT, 0x72) X(SETITEM, 0x73) X(TUPLE, 0x74) \
  X(EMPTY_TUPLE, 0x29) X(SETITEMS, 0x75) X(BINFLOAT, 0x47) X(PROTO, 0x80) X(NEWOBJ, 0x81)       \
  X(EXT1, 0x82) X(EXT2, 0x83) X(EXT4, 0x84) X(TUPLE1, 0x85) X(TUPLE2, 0x86) X(TUPLE3, 0x87)     \
  X(NEWTRUE, 0x88) X(NEWFALSE, 0x89) X(LONG1, 0x8A) X(LONG4, 0x8B) X(BINBYTES, 0x42)            \
  X(SHORT_BINBYTES, 0x43) X(SHORT_BINUNICODE, 0x8C) X(BINUNICODE8, 0x8D) X(BINBYTES8, 0x8E)     \
  X(EMPTY_SET, 0x8F) X(ADDITEMS, 0x90) X(FROZENSET, 0x91) X(NEWOBJ_EX, 0x92)                    \
  X(STACK_GLOBAL, 0x93) X(MEMOIZE, 0x94) X(FRAME, 0x95) X(BYTEARRAY8, 0x96) X(NEXT_BUFFER, 0x97) \
  X(READONLY_BUFFER, 0x98)
  // clang-format on

#define GPUMEMPROF_PICKLE_DECLARE(opname, byte) static constexpr std::uint8_t opname = byte;
  GPUMEMPROF_PICKLE_OPCODES(GPUMEMPROF_PICKLE_DECLARE)
#undef GPUMEMPROF_PICKLE_DECLARE

  /// The opcode's name, or nullptr for a byte that is no opcode.
  [[nodiscard]] static constexpr const char* name(std::uint8_t op) noexcept {
#define GPUMEMPROF_PICKLE_NAME(opname, byte) \
  if (op == (byte)) return #opname;
    GPUMEMPROF_PICKLE_OPCODES(GPUMEMPROF_PICKLE_NAME)
#undef GPUMEMPROF_PICKLE_NAME
    return nullptr;
  }
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END

#undef GPUMEMPROF_PICKLE_OPCODES
