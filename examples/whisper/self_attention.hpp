// Decoder self-attention policies. A policy S owns one decoder layer's self-attention
// sub-layer for a batch of sequences: the projections, a polyattn Attention with its cache,
// and the output projection (the decoder keeps the LayerNorm and the residual). Owning the
// projections lets a variant fold weights (slim attention's b_v into b_o, MLA's W_uv into W_o).
//
//   S::name()                                  the --self name, e.g. "mha/nhd"
//   S(const DecoderBlock&, const WhisperDims&, const DecoderConfig&)
//   int  open_sequence();  void close_sequence(int seq);
//   void prefill(seqs, x, out)   x, out: (n * B, d), B = seqs.size(), position-major: row
//                                p * B + i is token p of seqs[i]'s chunk; causal over what the
//                                sequence holds and the chunk
//   void decode(seqs, x, out)    x, out: (B, d), one new token per sequence
//   CacheUse cache_use() const   this layer's cache: bytes per token, tokens held, bytes
//
// x is the layer-normed decoder state; out is the sub-layer's output after W_o. The decoder
// checks ids, tokens and the 448-token context before it calls a policy.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// What a Decoder needs to build its attention policies.
struct DecoderConfig {
  int max_sequences = 1;  // sequences decoded at once (the batch)
  int threads = 0;        // attention executor threads (0 = all hardware threads)
};

// Cache held by one policy (or summed over the layers): what the CLI reports.
struct CacheUse {
  std::size_t bytes_per_token = 0;  // cache cost of one token (self) or audio frame (cross)
  std::size_t tokens = 0;           // tokens held by the open sequences (each counted once)
  std::size_t bytes_held = 0;       // bytes holding those tokens
  std::size_t bytes_allocated = 0;  // bytes reserved by the cache stores
};

template <class S>
concept SelfAttentionPolicy =
    std::constructible_from<S, const DecoderBlock&, const WhisperDims&, const DecoderConfig&> &&
    requires(S s, const S cs, int seq, std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
      { S::name() } -> std::convertible_to<std::string>;
      { s.open_sequence() } -> std::same_as<int>;
      s.close_sequence(seq);
      s.prefill(seqs, x, out);
      s.decode(seqs, x, out);
      { cs.cache_use() } -> std::same_as<CacheUse>;
    };

namespace detail {

// n rows of `cols` floats, `stride` floats apart: in a position-major (n * B, w) buffer,
// sequence i's chunk starts at row i and has stride B * w.
inline auto strided_rows(const float* data, Eigen::Index n, Eigen::Index cols, Eigen::Index stride) {
  return Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>>(data, n, cols, Eigen::OuterStride<>(stride));
}
inline auto strided_rows(float* data, Eigen::Index n, Eigen::Index cols, Eigen::Index stride) {
  return Eigen::Map<RowMatrixXf, 0, Eigen::OuterStride<>>(data, n, cols, Eigen::OuterStride<>(stride));
}

}  // namespace detail

// Whisper's pretrained self-attention as it is: K and V of every head cached (Mha), in any
// cache layout, run by any executor. The --self names are "mha/<layout>".
template <class Layout, class Executor = exec::CpuSimd>
class MhaSelfAttention {
 public:
  using attention_type = Attention<Mha, Layout, Executor, float>;

  static std::string name() { return Mha::name() + "/" + Layout::name(); }

  MhaSelfAttention(const DecoderBlock& b, const WhisperDims& d, const DecoderConfig& cfg)
      : qkv_(&b.self_qkv), out_(&b.self_out), d_(d.n_text_state),
        attn_({.n_heads = d.n_text_head, .head_dim = d.n_text_state / d.n_text_head},
              {.max_sequences = cfg.max_sequences, .capacity = d.n_text_ctx}, {}, cfg.threads) {}

  int open_sequence() { return attn_.open_sequence(); }
  void close_sequence(int seq) { attn_.close_sequence(seq); }

  void prefill(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    const auto B = static_cast<Eigen::Index>(seqs.size());
    const Eigen::Index n = x.rows() / B;
    qkv_buf_.resize(x.rows(), 3 * d_);
    linear_into(x, *qkv_, qkv_buf_);  // (n * B, 3d): [q | k | v]
    att_.resize(x.rows(), d_);
    for (Eigen::Index i = 0; i < B; ++i) {
      const float* row = qkv_buf_.data() + i * 3 * d_;
      const Eigen::Index stride = B * 3 * d_;
      const auto q = detail::strided_rows(row, n, d_, stride), k = detail::strided_rows(row + d_, n, d_, stride),
                 v = detail::strided_rows(row + 2 * d_, n, d_, stride);
      attn_.prefill(seqs[static_cast<std::size_t>(i)], q, {k, v}, Mask::causal,
                    detail::strided_rows(att_.data() + i * d_, n, d_, B * d_));
    }
    linear_into(att_, *out_, out);
  }

  void decode(std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) {
    qkv_buf_.resize(x.rows(), 3 * d_);
    linear_into(x, *qkv_, qkv_buf_);
    att_.resize(x.rows(), d_);
    attn_.decode(seqs, qkv_buf_.leftCols(d_), {qkv_buf_.middleCols(d_, d_), qkv_buf_.rightCols(d_)}, att_);
    linear_into(att_, *out_, out);
  }

  CacheUse cache_use() const {
    CacheUse u;
    u.bytes_per_token = attention_type::cache_bytes_per_token(attn_.shape());
    for (int s = 0; s < attn_.cache().max_sequences(); ++s)
      if (attn_.cache().is_open(s)) u.tokens += static_cast<std::size_t>(attn_.length(s));
    u.bytes_held = u.tokens * u.bytes_per_token;
    u.bytes_allocated = attn_.cache_bytes_allocated();
    return u;
  }

  const attention_type& attention() const { return attn_; }

 private:
  const Linear* qkv_;  // (3d, d): rows [q; k; v]
  const Linear* out_;
  Eigen::Index d_;
  attention_type attn_;
  RowMatrixXf qkv_buf_, att_;  // scratch: (rows, 3d), (rows, d)
};

}  // namespace polyattn::whisper
