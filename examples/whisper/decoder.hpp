// Whisper's text decoder with a KV cache: token + learned positional embeddings,
// pre-LayerNorm blocks of causal self-attention (cached K/V grow by one row per token),
// cross-attention over the encoder output (K/V computed once per audio window), MLP;
// final LayerNorm and logits through the tied token embedding.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "attention.hpp"
#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// Per-layer caches of one decoding stream.
struct DecoderLayerCache {
  RowMatrixXf self_k, self_v;    // (n_text_ctx, d); rows [0, length) are filled
  RowMatrixXf cross_k, cross_v;  // (n_audio_ctx, d); fixed for the audio window
};

struct DecoderState {
  std::vector<DecoderLayerCache> layers;
  int length = 0;  // tokens already in the self-attention caches
};

// Call site: decoder self-attention over the cache. q: (n_new, d) for positions
// [length, length + n_new); the cache already holds their K/V rows.
inline RowMatrixXf decoder_self_attention(const Eigen::Ref<const RowMatrixXf>& q, const DecoderLayerCache& cache,
                                          int length, int n_heads) {
  const Eigen::Index total = length + q.rows();
  return detail::multi_head_attention(q, cache.self_k.topRows(total), cache.self_v.topRows(total), n_heads, true, length);
}

// Call site: cross-attention of the new tokens over the encoder output's K/V.
inline RowMatrixXf decoder_cross_attention(const Eigen::Ref<const RowMatrixXf>& q, const DecoderLayerCache& cache,
                                           int n_heads) {
  return detail::multi_head_attention(q, cache.cross_k, cache.cross_v, n_heads, false);
}

// Starts a stream for one audio window: computes every layer's cross K/V from the
// encoder output (n_audio_ctx, d) once and allocates the self-attention caches.
inline DecoderState begin_decoding(const WhisperWeights& w, const RowMatrixXf& audio_features) {
  const WhisperDims& d = w.dims;
  if (audio_features.cols() != d.n_text_state)
    throw Error("begin_decoding: audio features have " + std::to_string(audio_features.cols()) + " columns, expected " +
                std::to_string(d.n_text_state));
  DecoderState s;
  for (const DecoderBlock& b : w.decoder) {
    const RowMatrixXf kv = linear(audio_features, b.cross_kv);  // (n_audio_ctx, 2d)
    s.layers.push_back({RowMatrixXf::Zero(d.n_text_ctx, d.n_text_state), RowMatrixXf::Zero(d.n_text_ctx, d.n_text_state),
                        kv.leftCols(d.n_text_state), kv.rightCols(d.n_text_state)});
  }
  return s;
}

// Feeds `tokens` (positions length .. length + n - 1) and returns the logits of the last
// one: (n_vocab). Throws when the context (n_text_ctx) would overflow.
inline RowVectorXf decode_step(const WhisperWeights& w, DecoderState& s, std::span<const int> tokens) {
  const WhisperDims& d = w.dims;
  const auto n = static_cast<Eigen::Index>(tokens.size());
  if (n == 0) throw Error("decode_step: no tokens");
  if (s.length + n > d.n_text_ctx)
    throw Error("decode_step: " + std::to_string(s.length + n) + " tokens exceed the text context " +
                std::to_string(d.n_text_ctx));
  if (s.layers.size() != w.decoder.size()) throw Error("decode_step: state was not made by begin_decoding");
  const Eigen::Index D = d.n_text_state;
  RowMatrixXf x(n, D);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int t = tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= d.n_vocab)
      throw Error("decode_step: token id " + std::to_string(t) + " is not in [0, " + std::to_string(d.n_vocab) + ")");
    x.row(i) = w.token_embedding.row(t) + w.decoder_positions.row(s.length + i);
  }
  for (std::size_t l = 0; l < w.decoder.size(); ++l) {
    const DecoderBlock& b = w.decoder[l];
    DecoderLayerCache& c = s.layers[l];
    const RowMatrixXf qkv = linear(layer_norm(x, b.self_ln), b.self_qkv);  // (n, 3D)
    c.self_k.middleRows(s.length, n) = qkv.middleCols(D, D);
    c.self_v.middleRows(s.length, n) = qkv.rightCols(D);
    x += linear(decoder_self_attention(qkv.leftCols(D), c, s.length, d.n_text_head), b.self_out);
    const RowMatrixXf q = linear(layer_norm(x, b.cross_ln), b.cross_q);
    x += linear(decoder_cross_attention(q, c, d.n_text_head), b.cross_out);
    RowMatrixXf hidden = linear(layer_norm(x, b.mlp_ln), b.fc1);
    gelu_inplace(hidden);
    x += linear(hidden, b.fc2);
  }
  s.length += static_cast<int>(n);
  const RowMatrixXf last = layer_norm(x.bottomRows(1), w.decoder_ln);  // (1, D)
  RowVectorXf logits(d.n_vocab);
  logits.noalias() = last * w.token_embedding.transpose();  // tied output projection
  return logits;
}

}  // namespace polyattn::whisper
