// Layer 1: the simulated device's model of the driver's virtual memory -- address reservations,
// and the physical allocations mapped into them, one per page of the reservation (as
// cuMemCreate + cuMemMap make them for CudaBackend).
//
// It enforces what the driver enforces, so that tests on sim:N catch a layout that would fail on
// a GPU: a map covers whole pages of its reservation and only unmapped address space; an unmap
// covers whole physical allocations, all mapped (cuMemUnmap cannot unmap part of a range mapped
// from one handle); a reservation goes back only with nothing mapped. Not thread-safe: the
// simulated device calls it under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "gpumemprof/config.hpp"
#include "gpumemprof/device/backend.hpp"
#include "gpumemprof/error.hpp"

GPUMEMPROF_NAMESPACE_BEGIN
namespace detail {

class PhysicalPages {
 public:
  /// A model for the device named `who` ("sim:0"), whose mapping granularity is `granularity`.
  PhysicalPages(std::string who, std::size_t granularity) : who_(std::move(who)), granularity_(granularity) {}

  /// Throws unless `page` is a whole number of granules, as physical allocations must be.
  void check_page(std::size_t page) const {
    if (page == 0 || page % granularity_ != 0) {
      fail("pages of " + std::to_string(page) + " bytes: not a multiple of the mapping granularity (" +
           std::to_string(granularity_) + " bytes)");
    }
  }

  /// Records reservation `r`: address space in whole pages of r.page bytes.
  void reserve(const Reservation& r) {
    check_page(r.page);
    if (r.size % r.page != 0) fail("a reservation of " + std::to_string(r.size) + " bytes: not whole pages");
    ranges_.emplace(r.base, Range{r.size, r.page, {}});
  }

  /// Forgets reservation `r`, which must have nothing mapped.
  void release(const Reservation& r) {
    auto it = ranges_.find(r.base);
    if (it == ranges_.end() || it->second.size != r.size) fail("release of an unknown reservation at " + hex(r.base));
    if (!it->second.pages.empty()) fail("release of reservation " + hex(r.base) + " with pages still mapped");
    ranges_.erase(it);
  }

  /// Checks that [offset, offset + bytes) of `r` is whole pages, none mapped (what map() needs).
  void check_map(const Reservation& r, std::size_t offset, std::size_t bytes) const {
    const Range& range = find(r, offset, bytes, "map");
    if (offset % range.page != 0 || bytes % range.page != 0) {
      fail("map of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " of reservation " +
           hex(r.base) + ": not whole pages of " + std::to_string(range.page) + " bytes");
    }
    auto it = range.pages.lower_bound(offset);
    if (it != range.pages.begin() && std::prev(it)->first + std::prev(it)->second > offset) --it;
    if (it != range.pages.end() && it->first < offset + bytes) {
      fail("map of pages already mapped at offset " + std::to_string(offset) + " of reservation " + hex(r.base));
    }
  }

  /// Maps [offset, offset + bytes) of `r` as one physical allocation per page (check_map first).
  void map(const Reservation& r, std::size_t offset, std::size_t bytes) {
    Range& range = ranges_.at(r.base);
    for (std::size_t at = offset; at < offset + bytes; at += range.page) range.pages.emplace(at, range.page);
    live_[range.page] += bytes / range.page;
  }

  /// Unmaps and releases the physical allocations [offset, offset + bytes) of `r`: it must cover
  /// each of them whole and hold nothing unmapped. Throws (and changes nothing) otherwise.
  void unmap(const Reservation& r, std::size_t offset, std::size_t bytes) {
    Range& range = find(r, offset, bytes, "unmap");
    auto first = range.pages.lower_bound(offset);
    if (first != range.pages.begin() && std::prev(first)->first + std::prev(first)->second > offset) {
      fail("unmap of part of a physical allocation: " + std::to_string(bytes) + " bytes at offset " +
           std::to_string(offset) + " of reservation " + hex(r.base) + " start inside the allocation at offset " +
           std::to_string(std::prev(first)->first) + " (" + std::to_string(std::prev(first)->second) + " bytes)");
    }
    std::size_t at = offset;
    auto it = first;
    for (; it != range.pages.end() && it->first < offset + bytes; ++it) {
      if (it->first != at) fail("unmap of address space not mapped at offset " + std::to_string(at));
      at += it->second;
    }
    if (at < offset + bytes) fail("unmap of address space not mapped at offset " + std::to_string(at));
    if (at > offset + bytes) {
      fail("unmap of part of a physical allocation: " + std::to_string(bytes) + " bytes at offset " +
           std::to_string(offset) + " of reservation " + hex(r.base) + " end inside the allocation at offset " +
           std::to_string(std::prev(it)->first) + " (" + std::to_string(std::prev(it)->second) + " bytes)");
    }
    for (auto p = first; p != it; ++p) {
      if (--live_[p->second] == 0) live_.erase(p->second);
    }
    range.pages.erase(first, it);
  }

  /// Live reservations.
  [[nodiscard]] std::size_t reservations() const noexcept { return ranges_.size(); }
  /// Live physical allocations: bytes each -> how many.
  [[nodiscard]] const std::map<std::size_t, std::size_t>& live() const noexcept { return live_; }

  static std::string hex(std::uintptr_t v) {
    char buf[2 + 16 + 1];
    std::snprintf(buf, sizeof buf, "0x%zx", static_cast<std::size_t>(v));
    return buf;
  }

 private:
  struct Range {
    std::size_t size = 0;
    std::size_t page = 0;
    std::map<std::size_t, std::size_t> pages;  // mapped physical allocations: offset -> bytes
  };

  [[noreturn]] void fail(const std::string& what) const { throw DeviceRuntimeError(who_ + ": " + what); }

  const Range& find(const Reservation& r, std::size_t offset, std::size_t bytes, const char* what) const {
    auto it = ranges_.find(r.base);
    if (it == ranges_.end() || bytes == 0 || offset + bytes > it->second.size || r.page != it->second.page) {
      fail(std::string("bad ") + what + " of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
           " of reservation " + hex(r.base));
    }
    return it->second;
  }
  Range& find(const Reservation& r, std::size_t offset, std::size_t bytes, const char* what) {
    return const_cast<Range&>(std::as_const(*this).find(r, offset, bytes, what));
  }

  std::string who_;
  std::size_t granularity_;
  std::map<std::uintptr_t, Range> ranges_;
  std::map<std::size_t, std::size_t> live_;
};

}  // namespace detail
GPUMEMPROF_NAMESPACE_END
