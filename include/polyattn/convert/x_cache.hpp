// Offline conversion of an MHA layer to the X-cache variant's parameters (variants/x_cache.hpp):
// the key bias is dropped (it cancels in the softmax), the value bias moves behind attention, and
// the fused query path's products W_q,i W_k,i^T are formed in double.
#pragma once

#include <cstddef>

#include <Eigen/Core>

#include "polyattn/convert/mha_weights.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/variants/x_cache.hpp"

namespace polyattn {

/// X-cache parameters from MHA weights (the key bias is dropped: it cancels in the softmax).
/// The fused products are formed in double.
inline XCache::Params make_x_cache_params(const MhaWeights& w, AttentionShape s, XCache::QueryPath path) {
  check_mha_weights(w, s);
  const int d = s.input_width(), e = s.query_width(), dh = s.head_dim;
  XCache::Params p;
  p.path = path;
  p.w_v = w.w_v;
  p.b_v = bias_or_zero(w.b_v, e);
  const Eigen::RowVectorXf b_q = bias_or_zero(w.b_q, e);
  if (path == XCache::QueryPath::projected) {
    p.w_q = w.w_q;
    p.b_q = b_q;
    p.w_k = w.w_k;
    return p;
  }
  p.w_qk.resize(d, std::ptrdiff_t(s.n_heads) * d);
  p.c_qk.resize(std::ptrdiff_t(s.n_heads) * d);
  for (int i = 0; i < s.n_heads; ++i) {
    const Eigen::MatrixXd wq = w.w_q.middleCols(std::ptrdiff_t(i) * dh, dh).cast<double>();
    const Eigen::MatrixXd wk = w.w_k.middleCols(std::ptrdiff_t(i) * dh, dh).cast<double>();
    p.w_qk.middleCols(std::ptrdiff_t(i) * d, d) = (wq * wk.transpose()).cast<float>();
    p.c_qk.segment(std::ptrdiff_t(i) * d, d) = (b_q.segment(std::ptrdiff_t(i) * dh, dh).cast<double>() * wk.transpose()).cast<float>();
  }
  return p;
}

inline XCache::Params make_x_cache_params(const MhaWeights& w, AttentionShape s) {
  return make_x_cache_params(w, s, cheaper_x_cache_query_path(s));
}

}  // namespace polyattn
