// Where an int8 cache row keeps its scales. A row of `codes` int8 codes is followed, in the same
// row of the store, by one float scale per `segment` codes (ceil(codes / segment) of them, 4
// bytes each, native byte order, not aligned): column c decodes to code[c] * scale[c / segment].
// A segment is what one query head reads of a row: one KV head's row for MHA/GQA/MQA (the whole
// row), one head's slice of slim attention's packed key row, the whole row of the X-cache.
//
//   row: | code[0] ... code[codes - 1] | scale[0] ... scale[segments - 1] |   (int8 elements)
#pragma once

#include <cstdint>
#include <cstring>

namespace polyattn {

struct RowScales {
  int codes = 0;    ///< int8 codes of the row (0: not an int8 row)
  int segment = 0;  ///< codes per scale

  constexpr int segments() const { return segment > 0 ? (codes + segment - 1) / segment : 0; }
  /// int8 elements the row takes in the store, scales included.
  constexpr int stored_elements() const { return codes + 4 * segments(); }
  constexpr bool operator==(const RowScales&) const = default;
};

/// The scale of segment `s` of an int8 row.
[[gnu::always_inline]] inline float segment_scale(const std::int8_t* row, RowScales layout, int s) {
  float scale;
  std::memcpy(&scale, row + layout.codes + 4 * s, sizeof scale);
  return scale;
}

}  // namespace polyattn
