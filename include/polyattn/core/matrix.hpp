// Eigen aliases used at the API boundary, and strided views of one head inside a row-major
// (tokens, heads * dim) buffer.
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

/// (tokens, dim) view of head `head` inside a row-major (tokens, heads * dim) buffer, without copying.
template <class T>
auto head_view(T* data, int tokens, int row_stride, int head, int dim) {
  using Mapped = std::conditional_t<std::is_const_v<T>, const RowMatrix<std::remove_const_t<T>>,
                                    RowMatrix<T>>;
  return Eigen::Map<Mapped, Eigen::Unaligned, Eigen::OuterStride<>>(
      data + std::ptrdiff_t(head) * dim, tokens, dim, Eigen::OuterStride<>(row_stride));
}

}  // namespace polyattn
