// The weights of one pretrained MHA layer, the input of every offline conversion.
//   q = x W_q + b_q, k = x W_k + b_k, v = x W_v + b_v   (x: (tokens, d); q, k, v: (tokens, e))
//   y = concat(heads) W_o + b_o                           (e = n_heads * head_dim)
#pragma once

#include <string>

#include <Eigen/Core>

#include "polyattn/core/error.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

struct MhaWeights {
  RowMatrixXf w_q, w_k, w_v;     // (d, e)
  RowMatrixXf w_o;               // (e, d)
  Eigen::RowVectorXf b_q, b_k, b_v;  // (e); empty = no bias
  Eigen::RowVectorXf b_o;        // (d); empty = no bias

  int model_dim() const { return int(w_q.rows()); }
  int width() const { return int(w_q.cols()); }
};

namespace detail {
inline void check_bias(const Eigen::RowVectorXf& b, int n, const char* what) {
  require<ShapeError>(b.size() == 0 || b.size() == n, what, " has ", b.size(), " entries, expected ", n, " (or none)");
}
}  // namespace detail

/// Throws ShapeError unless the weights fit `shape` (e = n_heads * head_dim, d = shape.input_width()).
inline void check_mha_weights(const MhaWeights& w, AttentionShape shape) {
  const int d = shape.input_width(), e = shape.query_width();
  auto check = [](const RowMatrixXf& m, int rows, int cols, const char* what) {
    require<ShapeError>(m.rows() == rows && m.cols() == cols, what, " is ", m.rows(), " x ", m.cols(), ", expected ", rows,
                        " x ", cols);
  };
  check(w.w_q, d, e, "W_q");
  check(w.w_k, d, e, "W_k");
  check(w.w_v, d, e, "W_v");
  check(w.w_o, e, d, "W_o");
  detail::check_bias(w.b_q, e, "b_q");
  detail::check_bias(w.b_k, e, "b_k");
  detail::check_bias(w.b_v, e, "b_v");
  detail::check_bias(w.b_o, d, "b_o");
}

/// `b`, or zeros of width n when the layer has no such bias.
inline Eigen::RowVectorXf bias_or_zero(const Eigen::RowVectorXf& b, int n) {
  return b.size() == 0 ? Eigen::RowVectorXf::Zero(n) : b;
}

}  // namespace polyattn
