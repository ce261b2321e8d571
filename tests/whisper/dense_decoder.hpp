// Test oracle: Whisper's decoder written out densely, with no cache and no policies. It
// recomputes every layer over the whole token prefix with a causal mask, in double, so the
// policy decoder (cached, incremental, batched) can be checked against it.
#pragma once

#include <whisper/layers.hpp>
#include <whisper/weights.hpp>

#include <cmath>
#include <vector>

namespace whisper_test {

using polyattn::whisper::RowMatrixXf;
using polyattn::whisper::RowVectorXf;
using polyattn::whisper::WhisperWeights;
using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Multi-head attention of q over k, v (heads are column blocks); causal: query i sees keys <= i.
inline RowMatrixXd dense_attention(const RowMatrixXd& q, const RowMatrixXd& k, const RowMatrixXd& v, int n_heads, bool causal) {
  const Eigen::Index d = q.cols(), dh = d / n_heads;
  RowMatrixXd out = RowMatrixXd::Zero(q.rows(), d);
  for (int h = 0; h < n_heads; ++h)
    for (Eigen::Index i = 0; i < q.rows(); ++i) {
      const Eigen::Index visible = causal ? i + 1 : k.rows();
      Eigen::VectorXd s = k.block(0, h * dh, visible, dh) * q.row(i).segment(h * dh, dh).transpose() / std::sqrt(double(dh));
      s = (s.array() - s.maxCoeff()).exp();
      s /= s.sum();
      out.row(i).segment(h * dh, dh) = s.transpose() * v.block(0, h * dh, visible, dh);
    }
  return out;
}

inline RowMatrixXd dense_linear(const RowMatrixXd& x, const polyattn::whisper::Linear& l) {
  RowMatrixXd y = x * l.weight.cast<double>().transpose();
  y.rowwise() += l.bias.cast<double>();
  return y;
}
inline RowMatrixXd dense_linear(const RowMatrixXd& x, const polyattn::whisper::StoredLinear& l) {
  return dense_linear(x, polyattn::whisper::Linear{l.weight.as_float(), l.bias});
}

inline RowMatrixXd dense_layer_norm(const RowMatrixXd& x, const polyattn::whisper::LayerNorm& ln) {
  RowMatrixXd y(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const double mean = x.row(i).mean();
    const double var = (x.row(i).array() - mean).square().mean();
    y.row(i) = ((x.row(i).array() - mean) / std::sqrt(var + ln.eps)).matrix().cwiseProduct(ln.gamma.cast<double>()) +
               ln.beta.cast<double>();
  }
  return y;
}

// Logits (n_vocab) after the last of `tokens` (positions 0 .. n - 1), given the encoder output.
inline RowVectorXf dense_decoder_logits(const WhisperWeights& w, const RowMatrixXf& audio_features, const std::vector<int>& tokens) {
  const auto n = static_cast<Eigen::Index>(tokens.size());
  const Eigen::Index D = w.dims.n_text_state;
  const int heads = w.dims.n_text_head;
  RowMatrixXd x(n, D);
  for (Eigen::Index i = 0; i < n; ++i)
    x.row(i) = (w.token_embedding.as_float().row(tokens[std::size_t(i)]) + w.decoder_positions.row(i)).cast<double>();
  const RowMatrixXd e = audio_features.cast<double>();
  for (const auto& b : w.decoder) {
    const RowMatrixXd qkv = dense_linear(dense_layer_norm(x, b.self_ln), b.self_qkv);
    x += dense_linear(dense_attention(qkv.leftCols(D), qkv.middleCols(D, D), qkv.rightCols(D), heads, true), b.self_out);
    const RowMatrixXd q = dense_linear(dense_layer_norm(x, b.cross_ln), b.cross_q);
    const RowMatrixXd kv = dense_linear(e, b.cross_kv);
    x += dense_linear(dense_attention(q, kv.leftCols(D), kv.rightCols(D), heads, false), b.cross_out);
    RowMatrixXd hidden = dense_linear(dense_layer_norm(x, b.mlp_ln), b.fc1);
    hidden = (0.5 * hidden.array() * (1.0 + (hidden.array() * M_SQRT1_2).erf())).matrix();
    x += dense_linear(hidden, b.fc2);
  }
  const RowMatrixXd last = dense_layer_norm(x.bottomRows(1), w.decoder_ln);
  return (last * w.token_embedding.as_float().cast<double>().transpose()).cast<float>();
}

}  // namespace whisper_test
