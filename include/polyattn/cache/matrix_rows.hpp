// Keys and values the caller already holds, (tokens, heads * dim) row-major matrices, presented
// with the store interface the executors read (`row`, `run`, `tensors`): tensor 0 = K, tensor
// 1 = V, one sequence (0). Uncached attention (uncached_attention.hpp) runs the executors over it.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

class MatrixRows {
 public:
  /// A token's heads are adjacent in a row, as in Nhd.
  static constexpr bool heads_adjacent = true;

  /// k (tokens, heads * key_dim) and v (tokens, heads * value_dim), the same number of rows;
  /// they must outlive the view.
  MatrixRows(ConstMatrixRef k, ConstMatrixRef v, int heads, int key_dim, int value_dim)
      : data_{k.data(), v.data()}, stride_{k.outerStride(), v.outerStride()}, tokens_(int(k.rows())),
        specs_{TensorSpec{heads, key_dim}, TensorSpec{heads, value_dim}} {}

  int length(int /*seq*/) const { return tokens_; }
  std::span<const TensorSpec> tensors() const { return specs_; }

  const float* row(int tensor, int /*seq*/, int token, int head) const {
    return data_[std::size_t(tensor)] + std::ptrdiff_t(token) * stride_[std::size_t(tensor)] +
           std::ptrdiff_t(head) * specs_[std::size_t(tensor)].dim;
  }
  CacheRun<float> run(int tensor, int seq, int token, int head) const {
    return {row(tensor, seq, token, head), stride_[std::size_t(tensor)], tokens_ - token};
  }

 private:
  std::array<const float*, 2> data_;
  std::array<std::ptrdiff_t, 2> stride_;
  int tokens_;
  std::array<TensorSpec, 2> specs_;
};

}  // namespace polyattn
