// Rotary position embedding (RoFormer), pairs (2j, 2j + 1) of each head rotated by
// m * theta_j, theta_j = base^(-2j / head_dim), m the token position. One function for encoding
// and decoding (the inverse is the same rotation by -m * theta_j), so a key rotated here and the
// same key rotated elsewhere agree to the bit.
#pragma once

#include <cmath>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"

namespace polyattn {

enum class RopeDirection { encode, decode };

/// Rotates every head of every row of `x` (rows, n_heads * head_dim) in place; row r is at
/// position first_pos + r.
inline void apply_rope(MatrixRef x, int first_pos, int head_dim, double base, RopeDirection dir = RopeDirection::encode) {
  require<ShapeError>(head_dim % 2 == 0, "RoPE needs an even head_dim, got ", head_dim);
  require<ShapeError>(x.cols() % head_dim == 0, "RoPE: ", x.cols(), " columns are not whole heads of ", head_dim);
  const double sign = dir == RopeDirection::encode ? 1.0 : -1.0;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const double m = double(first_pos + r);
    for (int j = 0; j < head_dim / 2; ++j) {
      const double angle = m * std::pow(base, -2.0 * j / head_dim);
      const float c = float(std::cos(angle)), s = float(sign * std::sin(angle));
      for (Eigen::Index h = 0; h < x.cols(); h += head_dim) {
        float& a = x(r, h + 2 * j);
        float& b = x(r, h + 2 * j + 1);
        const float x1 = a, x2 = b;  // seed notation: y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos
        a = x1 * c + x2 * s;
        b = -x1 * s + x2 * c;
      }
    }
  }
}

}  // namespace polyattn
