// Decoder cross-attention policies. Unlike self-attention, one policy object C serves every
// decoder layer, so a cache shared by all layers fits: a shared E-cache holds the encoder
// output once and each layer reads it through its own weights; a hybrid keeps layer 0's K
// and derives E from it. Per-layer caches (the baseline) are a vector inside C.
//
//   C::name()                                    the --cross name, e.g. "baseline"
//   C(const WhisperWeights&, const DecoderConfig&)
//   int  open(encoder_output)     (n_audio_ctx, d) of one audio window: computes what the
//                                 layers will read (once per window) and returns its sequence
//   void close(int seq)
//   void attend(layer, seqs, x, out)  x: (B, d) layer-normed decoder states, one per sequence;
//                                 out: (B, d) after the layer's output projection
//   CacheUse cache_use() const    over all layers; bytes_per_token is per audio frame
//
// The decoder calls attend once per layer and query position (a prompt of n tokens is n calls),
// after checking the sequence ids.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "self_attention.hpp"  // DecoderConfig, CacheUse
#include "weights.hpp"

namespace polyattn::whisper {

template <class C>
concept CrossAttentionPolicy =
    std::constructible_from<C, const WhisperWeights&, const DecoderConfig&> &&
    requires(C c, const C cc, int layer, int seq, std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
      { C::name() } -> std::convertible_to<std::string>;
      { c.open(x) } -> std::same_as<int>;
      c.close(seq);
      c.attend(layer, seqs, x, out);
      { cc.cache_use() } -> std::same_as<CacheUse>;
    };

// The baseline: every layer caches its cross K and V (E W_k, E W_v + b_v) for each window,
// computed once when the window is opened, and attends over them at every step.
template <class Layout = Nhd, class Executor = exec::CpuSimd>
class KvCrossAttention {
 public:
  using attention_type = Attention<Mha, Layout, Executor, float>;

  static std::string name() { return "baseline"; }

  KvCrossAttention(const WhisperWeights& w, const DecoderConfig& cfg) : w_(&w) {
    const WhisperDims& d = w.dims;
    layers_.reserve(w.decoder.size());
    for (std::size_t l = 0; l < w.decoder.size(); ++l)
      layers_.emplace_back(AttentionShape{.n_heads = d.n_text_head, .head_dim = d.n_text_state / d.n_text_head},
                           CacheConfig{.max_sequences = cfg.max_sequences, .capacity = d.n_audio_ctx},
                           typename attention_type::Params{}, cfg.threads);
  }

  int open(ConstMatrixRef encoder_output) {
    const WhisperDims& d = w_->dims;
    if (encoder_output.cols() != d.n_text_state || encoder_output.rows() < 1 || encoder_output.rows() > d.n_audio_ctx)
      throw ModelError("cross-attention: encoder output is " + std::to_string(encoder_output.rows()) + "x" +
                       std::to_string(encoder_output.cols()) + ", expected at most " + std::to_string(d.n_audio_ctx) +
                       " frames of " + std::to_string(d.n_text_state));
    int seq = -1;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const int s = layers_[l].open_sequence();
      if (l == 0) seq = s;
      if (s != seq) throw Error("cross-attention: layer caches disagree on the sequence slot");
      kv_.resize(encoder_output.rows(), 2 * d.n_text_state);
      linear_into(encoder_output, w_->decoder[l].cross_kv, kv_);  // (frames, 2d): [k | v]
      layers_[l].append(s, {kv_.leftCols(d.n_text_state), kv_.rightCols(d.n_text_state)});
    }
    return seq;
  }

  void close(int seq) {
    for (auto& a : layers_) a.close_sequence(seq);
  }

  void attend(int layer, std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    const DecoderBlock& b = w_->decoder[static_cast<std::size_t>(layer)];
    q_.resize(x.rows(), x.cols());
    linear_into(x, b.cross_q, q_);
    att_.resize(x.rows(), x.cols());
    layers_[static_cast<std::size_t>(layer)].attend(seqs, q_, att_);
    linear_into(att_, b.cross_out, out);
  }

  CacheUse cache_use() const {
    CacheUse u;
    for (const auto& a : layers_) {
      u.bytes_per_token += attention_type::cache_bytes_per_token(a.shape());
      u.bytes_allocated += a.cache_bytes_allocated();
    }
    const attention_type& first = layers_.front();
    for (int s = 0; s < first.cache().max_sequences(); ++s)
      if (first.cache().is_open(s)) u.tokens += static_cast<std::size_t>(first.length(s));
    u.bytes_held = u.tokens * u.bytes_per_token;
    return u;
  }

 private:
  const WhisperWeights* w_;
  std::vector<attention_type> layers_;
  RowMatrixXf kv_, q_, att_;  // scratch
};

}  // namespace polyattn::whisper
