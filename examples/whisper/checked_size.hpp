// Size arithmetic on values read from files: element counts and byte counts are products of
// dimensions a file chooses, so they are computed with overflow checks (a product that does not
// fit in 64 bits is an error, never a wrapped small number), and shapes print for messages.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace polyattn::whisper {

// a * b, or nullopt when the product does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

// The number of elements of `shape` (the product of its dimensions; 1 for a scalar), or nullopt
// when a dimension is negative or the product does not fit in 64 bits.
inline std::optional<std::uint64_t> shape_volume(std::span<const std::int64_t> shape) {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const std::optional<std::uint64_t> product = checked_mul(n, static_cast<std::uint64_t>(d));
    if (!product) return std::nullopt;
    n = *product;
  }
  return n;
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace polyattn::whisper
