// Layer 3: a fast stack walker for x86-64 Linux, used by capture_stack() (stacks.hpp).
//
// Why: libgcc's _Unwind_Backtrace finds and interprets each frame's DWARF call-frame
// information anew on every call -- about 100 ns a frame, 1.7 us for a 16-frame stack. An
// allocator event must cost far less. Allocation stacks repeat, so this walker interprets the
// call-frame information of each return address once and caches the result, a "frame rule":
//   CFA       = RSP + k  or  RBP + k        (the caller's stack pointer)
//   return    = [CFA + r]                   (r is -8 on x86-64)
//   caller's RBP = [CFA + b]  or unchanged
// A walk is then a few loads and one hash probe per frame.
//
// Safety: every stack read is checked against the thread's stack bounds. Anything this
// walker does not model -- CFA or register expressions (stack realignment), signal frames,
// code without unwind info, a stack outside the thread's stack (fibers) -- gives up, and
// capture_stack() asks libgcc's unwinder instead; both report the same frames.
// The cache is per thread (no locks) and assumes code is not unloaded (dlclose) while
// recording.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "gpumemprof/config.hpp"

#ifndef GPUMEMPROF_UNWIND_CACHE
#if defined(__x86_64__) && defined(__linux__) && GPUMEMPROF_WITH_STACKTRACE
#define GPUMEMPROF_UNWIND_CACHE 1
#else
#define GPUMEMPROF_UNWIND_CACHE 0
#endif
#endif

#if GPUMEMPROF_UNWIND_CACHE
#include <pthread.h>

// libgcc's FDE lookup (exported by libgcc_s since GCC 3.0; its header is not installed).
struct gpumemprof_dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;  // start of the function the FDE describes
};
extern "C" const void* _Unwind_Find_FDE(void* pc, gpumemprof_dwarf_eh_bases* bases);

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

/// How to step from a frame to its caller, valid at one return address.
struct FrameRule {
  enum Kind : std::uint8_t { rsp_based, rbp_based, outermost, unsupported };
  std::uintptr_t key = 0;  // return address (0: empty slot)
  std::int32_t cfa_offset = 0;
  std::int32_t ra_offset = -8;
  std::int32_t rbp_offset = 0;  // where the caller's RBP is saved (when rbp_saved)
  Kind kind = unsupported;
  bool rbp_saved = false;
};

/// Interprets the DWARF call-frame information (.eh_frame) for one code address.
class CfiReader {
 public:
  /// The rule in effect at `pc` (an address inside the instruction of interest).
  static FrameRule rule_at(std::uintptr_t pc) noexcept {
    FrameRule r;
    gpumemprof_dwarf_eh_bases bases{};
    const auto* fde = static_cast<const std::uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases));
    if (fde == nullptr) return r;  // no unwind info: unsupported
    CfiReader reader;
    if (!reader.run(fde, reinterpret_cast<std::uintptr_t>(bases.func), pc)) return r;
    return reader.result();
  }

 private:
  enum RegRule : std::uint8_t { same, undefined, offset, other };
  struct Row {
    std::uint64_t cfa_reg = 7;
    std::int64_t cfa_offset = 8;
    bool cfa_expression = false;
    RegRule rbp = same;
    std::int64_t rbp_offset = 0;
    RegRule ra = offset;
    std::int64_t ra_offset = -8;
  };
  static constexpr std::uint64_t kRbp = 6, kRsp = 7, kRa = 16;

  Row row_;
  Row initial_;  // after the CIE's instructions: the target of DW_CFA_restore
  std::uint64_t code_align_ = 1;
  std::int64_t data_align_ = -8;
  std::uint64_t ra_reg_ = kRa;
  std::uint8_t fde_encoding_ = 0;
  bool has_augmentation_data_ = false;  // CIE augmentation "z...": FDEs carry a length too
  bool signal_frame_ = false;

  static std::uint64_t uleb(const std::uint8_t*& p, const std::uint8_t* end, bool& ok) noexcept {
    std::uint64_t v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
      const std::uint8_t b = *p++;
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  static std::int64_t sleb(const std::uint8_t*& p, const std::uint8_t* end, bool& ok) noexcept {
    std::int64_t v = 0;
    int shift = 0;
    for (; p < end && shift < 64;) {
      const std::uint8_t b = *p++;
      v |= static_cast<std::int64_t>(b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) == 0) {
        if (shift < 64 && (b & 0x40) != 0) v |= -(std::int64_t{1} << shift);
        return v;
      }
    }
    ok = false;
    return 0;
  }
  template <class T>
  static T load(const std::uint8_t*& p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  // Reads a pointer of DW_EH_PE encoding `enc`; only the pc-relative and absolute applications
  // occur in .eh_frame pc fields (the function start comes from _Unwind_Find_FDE anyway).
  static bool encoded(const std::uint8_t*& p, const std::uint8_t* end, std::uint8_t enc,
                      std::uintptr_t& value) noexcept {
    if (enc == 0xff) return true;  // DW_EH_PE_omit
    const std::uint8_t* at = p;
    bool ok = true;
    std::int64_t v = 0;
    switch (enc & 0x0f) {
      case 0x00: v = static_cast<std::int64_t>(load<std::uint64_t>(p)); break;
      case 0x01: v = static_cast<std::int64_t>(uleb(p, end, ok)); break;
      case 0x02: v = load<std::uint16_t>(p); break;
      case 0x03: v = load<std::uint32_t>(p); break;
      case 0x04: v = static_cast<std::int64_t>(load<std::uint64_t>(p)); break;
      case 0x09: v = sleb(p, end, ok); break;
      case 0x0a: v = load<std::int16_t>(p); break;
      case 0x0b: v = load<std::int32_t>(p); break;
      case 0x0c: v = load<std::int64_t>(p); break;
      default: return false;
    }
    if ((enc & 0x70) == 0x10) v += static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(at));  // pcrel
    value = static_cast<std::uintptr_t>(v);
    return ok && p <= end;
  }

  bool parse_cie(const std::uint8_t* cie, const std::uint8_t*& insns, const std::uint8_t*& end) noexcept {
    const std::uint8_t* p = cie;
    std::uint64_t len = load<std::uint32_t>(p);
    if (len == 0xffffffffu) len = load<std::uint64_t>(p);
    end = p + len;
    if (load<std::uint32_t>(p) != 0) return false;  // CIE id
    const std::uint8_t version = *p++;
    const char* aug = reinterpret_cast<const char*>(p);
    p += std::strlen(aug) + 1;
    if (aug[0] == 'e' && aug[1] == 'h') return false;  // pre-GCC-3 layout
    bool ok = true;
    code_align_ = uleb(p, end, ok);
    data_align_ = sleb(p, end, ok);
    ra_reg_ = version == 1 ? *p++ : uleb(p, end, ok);
    if (aug[0] == 'z') {
      has_augmentation_data_ = true;
      const std::uint64_t aug_len = uleb(p, end, ok);
      const std::uint8_t* aug_end = p + aug_len;
      for (const char* a = aug + 1; *a != '\0' && ok; ++a) {
        if (*a == 'R') {
          fde_encoding_ = *p++;
        } else if (*a == 'P') {
          std::uintptr_t ignored = 0;
          const std::uint8_t enc = *p++;
          ok = encoded(p, aug_end, static_cast<std::uint8_t>(enc & 0x7f), ignored);
        } else if (*a == 'L') {
          ++p;
        } else if (*a == 'S') {
          signal_frame_ = true;
        } else {
          break;  // unknown letters: their data is skipped by the length
        }
      }
      p = aug_end;
    } else if (aug[0] != '\0') {
      return false;
    }
    insns = p;
    return ok && p <= end && ra_reg_ == kRa;
  }

  bool run(const std::uint8_t* fde, std::uintptr_t func, std::uintptr_t pc) noexcept {
    const std::uint8_t* p = fde;
    std::uint64_t len = load<std::uint32_t>(p);
    if (len == 0xffffffffu) len = load<std::uint64_t>(p);
    const std::uint8_t* fde_end = p + len;
    const std::uint8_t* id_field = p;
    const auto cie_offset = load<std::uint32_t>(p);
    const std::uint8_t* cie_insns = nullptr;
    const std::uint8_t* cie_end = nullptr;
    if (!parse_cie(id_field - cie_offset, cie_insns, cie_end) || signal_frame_) return false;
    std::uintptr_t ignored = 0;
    const auto value_format = static_cast<std::uint8_t>(fde_encoding_ & 0x0f);
    if (!encoded(p, fde_end, fde_encoding_, ignored) || !encoded(p, fde_end, value_format, ignored)) return false;
    bool ok = true;
    if (has_augmentation_data_) {
      const std::uint64_t aug_len = uleb(p, fde_end, ok);
      p += aug_len;
      if (!ok || p > fde_end) return false;
    }
    std::uintptr_t loc = func;
    if (!execute(cie_insns, cie_end, loc, ~std::uintptr_t{0})) return false;
    initial_ = row_;
    return execute(p, fde_end, loc, pc);
  }

  // Runs call-frame instructions while the location is <= pc (the row that covers pc).
  bool execute(const std::uint8_t* p, const std::uint8_t* end, std::uintptr_t& loc, std::uintptr_t pc) noexcept {
    Row saved[8];
    int depth = 0;
    bool ok = true;
    auto set_reg = [this](std::uint64_t reg, RegRule rule, std::int64_t off) {
      if (reg == kRbp) {
        row_.rbp = rule;
        row_.rbp_offset = off;
      } else if (reg == kRa) {
        row_.ra = rule;
        row_.ra_offset = off;
      } else if (reg == kRsp && rule != same) {
        row_.cfa_expression = true;  // a rule for RSP itself: not the x86-64 convention
      }
    };
    auto restore_reg = [this](std::uint64_t reg) {
      if (reg == kRbp) {
        row_.rbp = initial_.rbp;
        row_.rbp_offset = initial_.rbp_offset;
      } else if (reg == kRa) {
        row_.ra = initial_.ra;
        row_.ra_offset = initial_.ra_offset;
      }
    };
    while (ok && p < end && loc <= pc) {
      const std::uint8_t op = *p++;
      const std::uint8_t low = op & 0x3f;
      switch (op >> 6) {
        case 1: loc += low * code_align_; continue;  // DW_CFA_advance_loc
        case 2: set_reg(low, offset, static_cast<std::int64_t>(uleb(p, end, ok)) * data_align_); continue;
        case 3: restore_reg(low); continue;
        default: break;
      }
      switch (op) {
        case 0x00: break;                                            // nop
        case 0x01: ok = encoded(p, end, fde_encoding_, loc); break;  // set_loc
        case 0x02: loc += load<std::uint8_t>(p) * code_align_; break;
        case 0x03: loc += load<std::uint16_t>(p) * code_align_; break;
        case 0x04: loc += load<std::uint32_t>(p) * code_align_; break;
        case 0x05: {  // offset_extended
          const std::uint64_t reg = uleb(p, end, ok);
          set_reg(reg, offset, static_cast<std::int64_t>(uleb(p, end, ok)) * data_align_);
          break;
        }
        case 0x06: restore_reg(uleb(p, end, ok)); break;
        case 0x07: set_reg(uleb(p, end, ok), undefined, 0); break;
        case 0x08: set_reg(uleb(p, end, ok), same, 0); break;
        case 0x09: {  // register
          const std::uint64_t reg = uleb(p, end, ok);
          (void)uleb(p, end, ok);
          set_reg(reg, other, 0);
          break;
        }
        case 0x0a:  // remember_state
          if (depth == 8) return false;
          saved[depth++] = row_;
          break;
        case 0x0b:  // restore_state (the CFA rule is part of the state, as in libgcc)
          if (depth == 0) return false;
          row_ = saved[--depth];
          break;
        case 0x0c:  // def_cfa
          row_.cfa_reg = uleb(p, end, ok);
          row_.cfa_offset = static_cast<std::int64_t>(uleb(p, end, ok));
          row_.cfa_expression = false;
          break;
        case 0x0d:
          row_.cfa_reg = uleb(p, end, ok);
          row_.cfa_expression = false;
          break;
        case 0x0e: row_.cfa_offset = static_cast<std::int64_t>(uleb(p, end, ok)); break;
        case 0x0f: {  // def_cfa_expression
          const std::uint64_t n = uleb(p, end, ok);
          p += n;
          row_.cfa_expression = true;
          break;
        }
        case 0x10:
        case 0x16: {  // expression, val_expression
          const std::uint64_t reg = uleb(p, end, ok);
          const std::uint64_t n = uleb(p, end, ok);
          p += n;
          set_reg(reg, other, 0);
          break;
        }
        case 0x11: {  // offset_extended_sf
          const std::uint64_t reg = uleb(p, end, ok);
          set_reg(reg, offset, sleb(p, end, ok) * data_align_);
          break;
        }
        case 0x12:  // def_cfa_sf
          row_.cfa_reg = uleb(p, end, ok);
          row_.cfa_offset = sleb(p, end, ok) * data_align_;
          row_.cfa_expression = false;
          break;
        case 0x13: row_.cfa_offset = sleb(p, end, ok) * data_align_; break;
        case 0x14:
        case 0x15: {  // val_offset(_sf): a value, not a saved location
          const std::uint64_t reg = uleb(p, end, ok);
          if (op == 0x14)
            (void)uleb(p, end, ok);
          else
            (void)sleb(p, end, ok);
          set_reg(reg, other, 0);
          break;
        }
        case 0x2e: (void)uleb(p, end, ok); break;  // GNU_args_size: landing pads only
        case 0x2f: {                               // GNU_negative_offset_extended
          const std::uint64_t reg = uleb(p, end, ok);
          set_reg(reg, offset, -static_cast<std::int64_t>(uleb(p, end, ok)) * data_align_);
          break;
        }
        default: return false;
      }
    }
    return ok && p <= end;
  }

  [[nodiscard]] FrameRule result() const noexcept {
    FrameRule r;
    if (row_.ra == undefined) {
      r.kind = FrameRule::outermost;
      return r;
    }
    if (row_.cfa_expression || (row_.cfa_reg != kRsp && row_.cfa_reg != kRbp) || row_.ra != offset ||
        (row_.rbp != same && row_.rbp != offset)) {
      return r;  // unsupported
    }
    r.kind = row_.cfa_reg == kRsp ? FrameRule::rsp_based : FrameRule::rbp_based;
    r.cfa_offset = static_cast<std::int32_t>(row_.cfa_offset);
    r.ra_offset = static_cast<std::int32_t>(row_.ra_offset);
    r.rbp_saved = row_.rbp == offset;
    r.rbp_offset = static_cast<std::int32_t>(row_.rbp_offset);
    return r;
  }
};

/// One thread's cache of frame rules, and the walk over it.
class UnwindCache {
 public:
  /// The calling thread's cache, or nullptr once the thread's thread_locals are being destroyed
  /// (a destructor that frees device memory while history records).
  static UnwindCache* local() noexcept {
    static thread_local UnwindCache cache;
    return gone ? nullptr : &cache;
  }

  static constexpr std::size_t give_up = ~std::size_t{0};

  /// Up to `max` return addresses above this function's caller after skipping `skip` more
  /// frames, innermost first -- the frames _Unwind_Backtrace reports -- or give_up when the
  /// stack holds a frame this walker does not model.
  GPUMEMPROF_NOINLINE std::size_t capture(std::uintptr_t* out, std::size_t max, std::size_t skip) noexcept {
    std::uintptr_t pc = 0;
    std::uintptr_t sp = 0;
    std::uintptr_t bp = 0;
    // This frame's registers at one instruction; its rule comes from the same CFI as any other.
    // Fixed output registers: none may be RBP, which the third instruction reads.
    asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=a"(pc), "=d"(sp), "=c"(bp));
    std::size_t n = walk(pc + 1, sp, bp, out, max, skip + 1);
    asm volatile("" : "+r"(n));  // no tail call: the walk reads this frame's saved registers
    return n;
  }

  /// Rules cached by this thread (for tests).
  [[nodiscard]] std::size_t cached_rules() const noexcept { return used_; }

  UnwindCache(const UnwindCache&) = delete;
  UnwindCache& operator=(const UnwindCache&) = delete;

 private:
  UnwindCache() noexcept {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      std::size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        stack_lo_ = reinterpret_cast<std::uintptr_t>(addr);
        stack_hi_ = stack_lo_ + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  ~UnwindCache() { gone = true; }
  static inline thread_local bool gone = false;  // trivially destructible: readable at thread exit

  [[nodiscard]] bool on_stack(std::uintptr_t addr) const noexcept {
    return addr >= stack_lo_ && addr + sizeof(std::uintptr_t) <= stack_hi_ && addr % alignof(std::uintptr_t) == 0;
  }

  // key: a return address (or an exact pc + 1); the rule covers key - 1.
  const FrameRule* rule(std::uintptr_t key) noexcept {
    if (slots_ != nullptr) {
      for (std::size_t i = index(key);; i = (i + 1) & mask_) {
        const FrameRule& r = slots_[i];
        if (r.key == key) return &r;
        if (r.key == 0) break;
      }
    }
    FrameRule r = CfiReader::rule_at(key - 1);
    r.key = key;
    return insert(r);
  }

  [[nodiscard]] std::size_t index(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  const FrameRule* insert(const FrameRule& r) noexcept {
    if ((used_ + 1) * 2 > mask_ + 1 || slots_ == nullptr) {
      const std::size_t cap = slots_ == nullptr ? 1024 : (mask_ + 1) * 2;
      std::unique_ptr<FrameRule[]> old;
      const std::size_t old_cap = slots_ == nullptr ? 0 : mask_ + 1;
      try {
        old = std::exchange(slots_, std::unique_ptr<FrameRule[]>(new FrameRule[cap]));
      } catch (...) {
        return nullptr;  // out of memory: this capture takes the slow path
      }
      mask_ = cap - 1;
      shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(cap));
      used_ = 0;
      for (std::size_t i = 0; i < old_cap; ++i) {
        if (old[i].key != 0) place(old[i]);
      }
    }
    return place(r);
  }
  const FrameRule* place(const FrameRule& r) noexcept {
    std::size_t i = index(r.key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = r;
    ++used_;
    return &slots_[i];
  }

  std::size_t walk(std::uintptr_t key, std::uintptr_t sp, std::uintptr_t bp, std::uintptr_t* out, std::size_t max,
                   std::size_t skip) noexcept {
    if (!on_stack(sp)) return give_up;  // e.g. running on a fiber's stack
    std::size_t n = 0;
    for (std::size_t i = 0;; ++i) {
      if (i >= skip) {
        out[n++] = key;
        if (n == max) return n;
      }
      const FrameRule* r = rule(key);
      if (r == nullptr || r->kind == FrameRule::unsupported) return give_up;
      if (r->kind == FrameRule::outermost) return n;
      const std::uintptr_t cfa =
          (r->kind == FrameRule::rsp_based ? sp : bp) + static_cast<std::intptr_t>(r->cfa_offset);
      const std::uintptr_t ra_at = cfa + static_cast<std::intptr_t>(r->ra_offset);
      if (cfa <= sp || !on_stack(ra_at)) return give_up;
      if (r->rbp_saved) {
        const std::uintptr_t bp_at = cfa + static_cast<std::intptr_t>(r->rbp_offset);
        if (!on_stack(bp_at)) return give_up;
        bp = *reinterpret_cast<const std::uintptr_t*>(bp_at);
      }
      key = *reinterpret_cast<const std::uintptr_t*>(ra_at);
      sp = cfa;
      if (key == 0) return n;  // libgcc ends the walk at a zero return address too
    }
  }

  std::unique_ptr<FrameRule[]> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t used_ = 0;
  std::uintptr_t stack_lo_ = 0;
  std::uintptr_t stack_hi_ = 0;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END

#endif  // GPUMEMPROF_UNWIND_CACHE
