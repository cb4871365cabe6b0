// Byte units for tests, defined once (test executables build as one translation unit each).
#pragma once

#include <cstddef>
#include <cstdint>

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;
inline constexpr auto iMiB = static_cast<std::int64_t>(MiB);
