// Whisper's audio encoder: conv stem (two kernel-3 convs with GELU, the second with
// stride 2), sinusoidal positions, pre-LayerNorm transformer blocks, final LayerNorm.
#pragma once

#include <Eigen/Core>

#include <string>

#include "dense.hpp"
#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// mel: (n_mels, 2 * n_audio_ctx) = one 30 s window. Returns (n_audio_ctx, d). The products run
// on `dense`; LayerNorm, GELU and the residual sums on the CPU.
inline RowMatrixXf encode(const WhisperWeights& w, const RowMatrixXf& mel, Dense& dense = eigen_dense()) {
  const WhisperDims& d = w.dims;
  if (mel.rows() != d.n_mels || mel.cols() != 2 * d.n_audio_ctx)
    throw Error("encode: mel window is " + std::to_string(mel.rows()) + "x" + std::to_string(mel.cols()) +
                ", expected " + std::to_string(d.n_mels) + "x" + std::to_string(2 * d.n_audio_ctx));
  const RowMatrixXf frames = mel.transpose();  // (3000, n_mels), time-major
  RowMatrixXf x = dense.conv1d_k3(frames, w.conv1_w, w.conv1_b, 1);  // (3000, d)
  gelu_inplace(x);
  x = dense.conv1d_k3(x, w.conv2_w, w.conv2_b, 2);  // (1500, d)
  gelu_inplace(x);
  x += w.encoder_positions;
  for (const EncoderBlock& b : w.encoder) {
    const RowMatrixXf qkv = dense.linear(layer_norm(x, b.attn_ln), b.qkv);
    x += dense.linear(dense.bidirectional_attention(qkv, d.n_audio_head), b.attn_out);
    RowMatrixXf hidden = dense.linear(layer_norm(x, b.mlp_ln), b.fc1);
    gelu_inplace(hidden);
    x += dense.linear(hidden, b.fc2);
  }
  return layer_norm(x, w.encoder_ln);
}

}  // namespace polyattn::whisper
