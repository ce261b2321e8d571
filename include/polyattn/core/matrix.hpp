// Eigen aliases used at the API boundary: row-major, so a token is one contiguous row.
#pragma once

#include <Eigen/Core>

namespace polyattn {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXf = RowMatrix<float>;

/// Read-only (tokens, features) input; any row-major matrix or block with unit inner stride binds.
using ConstMatrixRef = Eigen::Ref<const RowMatrixXf>;
/// Writable (tokens, features) output.
using MatrixRef = Eigen::Ref<RowMatrixXf>;

/// Rows up to which multiply_rows takes one matrix-vector product per row.
inline constexpr Eigen::Index kRowByRowRows = 4;

/// dst = lhs * rhs, dst aliasing neither. A decode step multiplies a few query rows by
/// projections; Eigen's matrix-matrix product packs the whole of rhs on every call, and for
/// XCache's per-head projections (d = 384, 6 heads, f32) that packing cost more than the
/// products: one attend at L 64 took 0.03-0.05 ms at 1 row (a matrix-vector product already)
/// and 0.18-0.38 ms at 2 to 4. Row by row (nothing packed; each row reads the weights again), in
/// two alternated rounds on an Intel Xeon: XCache 0.12 ms at 2 rows, 0.10-0.15 at 3, 0.14-0.20
/// at 4 (1.2-3x faster); SlimK2, whose output projection alone goes through here, 0.05 against
/// 0.06-0.09 at 2 and 3 rows and the same at 4. From 5 rows the two were within the noise or row
/// by row slower, so the matrix product is kept there.
template <class Dst, class Lhs, class Rhs>
void multiply_rows(Dst&& dst, const Lhs& lhs, const Rhs& rhs) {
  if (lhs.rows() <= kRowByRowRows)
    for (Eigen::Index r = 0; r < lhs.rows(); ++r) dst.row(r).noalias() = lhs.row(r) * rhs;
  else
    dst.noalias() = lhs * rhs;
}

}  // namespace polyattn
