// Decoder cross-attention policies. Unlike self-attention, one policy object C serves every
// decoder layer, so a cache shared by all layers fits: a shared E-cache holds the encoder
// output once and each layer reads it through its own weights; a hybrid keeps layer 0's K
// and derives E from it.
//
//   C::name()                                    the --cross name, e.g. "baseline"
//   C(const WhisperWeights&, const DecoderConfig&)
//   int  open(encoder_output)     (n_audio_ctx, d) of one audio window; returns its sequence
//   void close(int seq)
//   void attend(layer, seqs, x, out)  x: (B, d) layer-normed decoder states, one per sequence;
//                                 out: (B, d) after the layer's output projection
//   CacheUse cache_use(readers) const   over all layers; bytes_per_token is per audio frame;
//                                 readers[seq]: the decoder sequences (beams) reading window seq
//   std::vector<std::string> notes() const   what the conversion measured, a line per converted layer
//
// The decoder calls attend once per layer and query position (a prompt of n tokens is n calls),
// after checking the sequence ids.
//
// The policies are the library's CrossAttention<Option> (polyattn/layers/cross_cache.hpp):
//   baseline  per layer K and V (2 d floats per frame and layer)
//   k-only    per layer K, V = K W_kv (slim attention; d per frame and layer)
//   e-cache   the encoder output E once for all layers (d per frame)
//   hybrid    layer 0's K once for all layers (d per frame)
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/layers/cross_cache.hpp>

#include "attention_weights.hpp"
#include "error.hpp"
#include "matrix.hpp"
#include "onednn_dense.hpp"
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
      { cc.cache_use(seqs) } -> std::same_as<CacheUse>;
      { cc.notes() } -> std::same_as<std::vector<std::string>>;
    };

// Hnd by default: the per-layer K/V of the baseline stream head by head (bench_decode: Hnd reads
// at 0.83-0.94 of DRAM bandwidth, Nhd at 0.32-0.52); the other options cache one head.
template <class Option, class Layout = Hnd, class Executor = exec::CpuSimd>
class CrossCacheAttention {
 public:
  using attention_type = CrossAttention<Option, Layout, Executor>;

  static std::string name() { return Option::name(); }

  CrossCacheAttention(const WhisperWeights& w, const DecoderConfig& cfg)
      : dims_(w.dims),
        cross_({.n_heads = w.dims.n_text_head, .head_dim = w.dims.n_text_state / w.dims.n_text_head, .model_dim = w.dims.n_text_state},
               layer_weights(w), {.max_sequences = cfg.audio_slots(), .capacity = w.dims.n_audio_ctx}, cfg.threads),
        frames_(static_cast<std::size_t>(cfg.audio_slots()), 0) {
    // The baseline's 8 encoder-output products per window (k-only's 4, the hybrid's 1) on
    // oneDNN rather than Eigen: float32 either way, whatever --compute-type says.
    cross_.set_encoder_projection(&onednn_encoder_projection);
  }

  int open(ConstMatrixRef encoder_output) {
    if (encoder_output.cols() != dims_.n_text_state || encoder_output.rows() < 1 || encoder_output.rows() > dims_.n_audio_ctx)
      throw ModelError("cross-attention: encoder output is " + std::to_string(encoder_output.rows()) + "x" +
                       std::to_string(encoder_output.cols()) + ", expected 1 to " + std::to_string(dims_.n_audio_ctx) +
                       " frames of " + std::to_string(dims_.n_text_state));
    const int seq = cross_.open_sequence();
    try {
      cross_.set_encoder_output(seq, encoder_output);
    } catch (...) {
      cross_.close_sequence(seq);
      throw;
    }
    frames_[static_cast<std::size_t>(seq)] = static_cast<std::size_t>(encoder_output.rows());
    return seq;
  }

  void close(int seq) {
    cross_.close_sequence(seq);
    frames_[static_cast<std::size_t>(seq)] = 0;
  }

  void attend(int layer, std::span<const int> seqs, ConstMatrixRef x, MatrixRef out) { cross_.attend(layer, seqs, x, out); }

  // Frames count when a window opens; bytes when they are cached (the baseline and K-only project
  // E at a layer's first attend, so right after open() a window holds E, not yet its K/V).
  CacheUse cache_use(std::span<const int> readers) const {
    CacheUse u;
    u.bytes_per_token = cross_.cache_bytes_per_frame();
    u.bytes_allocated = cross_.cache_bytes_allocated();
    for (std::size_t s = 0; s < frames_.size(); ++s)
      if (frames_[s] > 0) {
        const std::size_t bytes = cross_.cache_bytes(static_cast<int>(s));
        u.tokens += frames_[s];
        u.bytes_held += bytes;
        u.bytes_if_copied += bytes * std::size_t(s < readers.size() ? std::max(readers[s], 1) : 1);
      }
    return u;
  }

  std::vector<std::string> notes() const {
    std::vector<std::string> out;
    for (const SlimKReport& r : cross_.reports()) out.push_back(r.summary());
    return out;
  }

 private:
  static std::vector<MhaWeights> layer_weights(const WhisperWeights& w) {
    std::vector<MhaWeights> layers;
    for (const DecoderBlock& b : w.decoder) layers.push_back(cross_attention_weights(b));
    return layers;
  }

  WhisperDims dims_;
  attention_type cross_;
  std::vector<std::size_t> frames_;  // per sequence slot: encoder frames of the open window, 0 = closed
};

}  // namespace polyattn::whisper
