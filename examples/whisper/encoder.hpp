// Whisper's audio encoder: conv stem (two kernel-3 convs with GELU, the second with
// stride 2), sinusoidal positions, pre-LayerNorm transformer blocks, final LayerNorm.
#pragma once

#include <Eigen/Core>

#include <cmath>
#include <string>

#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// Encoder self-attention: bidirectional over the 1500 frames of a window, nothing cached.
// This is GEMM work (per head, (1500, 64) x (64, 1500) scores and (1500, 1500) x (1500, 64)
// outputs), so it stays on Eigen's GEMM rather than polyattn's decode kernels, which walk
// the keys once per query row; measured on tiny.en, Attention<Mha, Nhd, CpuSimd>::prefill with
// Mask::full is slower (see the README). qkv: (n, 3d) = [q | k | v]; returns (n, d).
inline RowMatrixXf encoder_self_attention(const RowMatrixXf& qkv, int n_heads) {
  const Eigen::Index d = qkv.cols() / 3, n = qkv.rows();
  if (n_heads <= 0 || d % n_heads != 0 || qkv.cols() != 3 * d)
    throw ModelError("encoder_self_attention: qkv has " + std::to_string(qkv.cols()) + " columns, not 3 x a multiple of " +
                     std::to_string(n_heads) + " heads");
  const Eigen::Index dh = d / n_heads;
  // Whisper scales q and k by dh^-1/4 each; one 1/sqrt(dh) on the scores is the same.
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  RowMatrixXf out(n, d), scores(n, n);
  const RowMatrixXf q = qkv.leftCols(d) * scale;
  for (int h = 0; h < n_heads; ++h) {
    scores.noalias() = q.middleCols(h * dh, dh) * qkv.middleCols(d + h * dh, dh).transpose();  // (n, n)
    for (Eigen::Index i = 0; i < n; ++i) {
      auto row = scores.row(i);
      row = (row.array() - row.maxCoeff()).exp().matrix();
      row /= row.sum();
    }
    out.middleCols(h * dh, dh).noalias() = scores * qkv.middleCols(2 * d + h * dh, dh);
  }
  return out;
}

// mel: (n_mels, 2 * n_audio_ctx) = one 30 s window. Returns (n_audio_ctx, d).
inline RowMatrixXf encode(const WhisperWeights& w, const RowMatrixXf& mel) {
  const WhisperDims& d = w.dims;
  if (mel.rows() != d.n_mels || mel.cols() != 2 * d.n_audio_ctx)
    throw Error("encode: mel window is " + std::to_string(mel.rows()) + "x" + std::to_string(mel.cols()) +
                ", expected " + std::to_string(d.n_mels) + "x" + std::to_string(2 * d.n_audio_ctx));
  const RowMatrixXf frames = mel.transpose();  // (3000, n_mels), time-major
  RowMatrixXf x = conv1d_k3(frames, w.conv1_w, w.conv1_b, 1);  // (3000, d)
  gelu_inplace(x);
  x = conv1d_k3(x, w.conv2_w, w.conv2_b, 2);  // (1500, d)
  gelu_inplace(x);
  x += w.encoder_positions;
  for (const EncoderBlock& b : w.encoder) {
    const RowMatrixXf qkv = linear(layer_norm(x, b.attn_ln), b.qkv);
    x += linear(encoder_self_attention(qkv, d.n_audio_head), b.attn_out);
    RowMatrixXf hidden = linear(layer_norm(x, b.mlp_ln), b.fc1);
    gelu_inplace(hidden);
    x += linear(hidden, b.fc2);
  }
  return layer_norm(x, w.encoder_ln);
}

}  // namespace polyattn::whisper
