// The stand-in attention kernel of the Whisper example: plain multi-head scaled
// dot-product attention over Eigen blocks. It is reached only through the three call
// sites in encoder.hpp (self) and decoder.hpp (self with KV cache, cross), which the
// polyattn policies (Attention<Variant, Layout, Executor, T>) will replace.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <string>

#include "error.hpp"
#include "matrix.hpp"

namespace polyattn::whisper::detail {

// q: (n_q, d); k, v: (n_kv, d), heads are column blocks of width d / n_heads.
// Query row i may attend key j iff !causal or j <= i + causal_offset (the cache holds
// causal_offset earlier tokens). Returns (n_q, d).
inline RowMatrixXf multi_head_attention(const Eigen::Ref<const RowMatrixXf>& q, const Eigen::Ref<const RowMatrixXf>& k,
                                        const Eigen::Ref<const RowMatrixXf>& v, int n_heads, bool causal,
                                        Eigen::Index causal_offset = 0) {
  const Eigen::Index d = q.cols();
  if (n_heads <= 0 || d % n_heads != 0 || k.cols() != d || v.cols() != d || k.rows() != v.rows())
    throw ModelError("multi_head_attention: bad shapes q " + std::to_string(q.rows()) + "x" + std::to_string(d) +
                     ", k " + std::to_string(k.rows()) + "x" + std::to_string(k.cols()) + ", v " +
                     std::to_string(v.rows()) + "x" + std::to_string(v.cols()) + ", heads " + std::to_string(n_heads));
  const Eigen::Index dh = d / n_heads, n_q = q.rows(), n_kv = k.rows();
  // Whisper scales q and k by dh^-1/4 each; one 1/sqrt(dh) on the scores is the same.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  RowMatrixXf out(n_q, d);
  RowMatrixXf scores(n_q, n_kv);
  const RowMatrixXf q_scaled = q * scale;
  for (int h = 0; h < n_heads; ++h) {
    scores.noalias() = q_scaled.middleCols(h * dh, dh) * k.middleCols(h * dh, dh).transpose();  // (n_q, n_kv)
    // Row-wise softmax over the visible keys; masked keys get probability 0.
    for (Eigen::Index i = 0; i < n_q; ++i) {
      auto row = scores.row(i);
      const Eigen::Index visible = causal ? std::min<Eigen::Index>(n_kv, i + causal_offset + 1) : n_kv;
      row.tail(n_kv - visible).setZero();
      auto live = row.head(visible);
      live = (live.array() - live.maxCoeff()).exp().matrix();
      live /= live.sum();
    }
    out.middleCols(h * dh, dh).noalias() = scores * v.middleCols(h * dh, dh);
  }
  return out;
}

}  // namespace polyattn::whisper::detail
