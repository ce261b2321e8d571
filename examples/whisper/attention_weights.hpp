// A decoder block's attention weights in the forms the library's converters take, in float
// whatever precision the model ships them in. Whisper stores torch Linear weights (out, in);
// polyattn::MhaWeights is the x·W convention (in, out), the one weights type of every converter
// (slim K-only, X-cache, Whisper-MLA).
//   self:  q, k, v from the fused self_qkv (rows [q; k; v]); the key has no bias
//   cross: q from cross_q; k, v from cross_kv (rows [k; v]), applied to the encoder output
#pragma once

#include <polyattn/convert/mha_weights.hpp>

#include "weights.hpp"

namespace polyattn::whisper {

namespace detail {

// Rows [first, first + n) of a linear layer as float x·W weights (in, n) and bias (n).
inline RowMatrixXf xw_weight(const StoredLinear& l, Eigen::Index first, Eigen::Index n) {
  return l.weight.float_rows(first, n).transpose();
}
inline RowMatrixXf xw_weight(const StoredLinear& l) { return xw_weight(l, 0, l.out_features()); }
inline RowVectorXf xw_bias(const StoredLinear& l, Eigen::Index first, Eigen::Index n) { return l.bias.segment(first, n); }

}  // namespace detail

inline MhaWeights self_attention_weights(const DecoderBlock& b) {
  const Eigen::Index d = b.self_out.out_features();
  MhaWeights w;
  w.w_q = detail::xw_weight(b.self_qkv, 0, d);
  w.w_k = detail::xw_weight(b.self_qkv, d, d);
  w.w_v = detail::xw_weight(b.self_qkv, 2 * d, d);
  w.b_q = detail::xw_bias(b.self_qkv, 0, d);
  w.b_k = detail::xw_bias(b.self_qkv, d, d);
  w.b_v = detail::xw_bias(b.self_qkv, 2 * d, d);
  w.w_o = detail::xw_weight(b.self_out);
  w.b_o = b.self_out.bias;
  return w;
}

inline MhaWeights cross_attention_weights(const DecoderBlock& b) {
  const Eigen::Index d = b.cross_out.out_features();
  MhaWeights w;
  w.w_q = detail::xw_weight(b.cross_q);
  w.b_q = b.cross_q.bias;
  w.w_k = detail::xw_weight(b.cross_kv, 0, d);
  w.b_k = detail::xw_bias(b.cross_kv, 0, d);
  w.w_v = detail::xw_weight(b.cross_kv, d, d);
  w.b_v = detail::xw_bias(b.cross_kv, d, d);
  w.w_o = detail::xw_weight(b.cross_out);
  w.b_o = b.cross_out.bias;
  return w;
}

}  // namespace polyattn::whisper
