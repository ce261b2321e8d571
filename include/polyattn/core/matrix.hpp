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

}  // namespace polyattn
