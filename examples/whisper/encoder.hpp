// Whisper's audio encoder: conv stem (two kernel-3 convs with GELU, the second with
// stride 2), sinusoidal positions, pre-LayerNorm transformer blocks, final LayerNorm.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <string>

#include "onednn_dense.hpp"
#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// Rows of the encoder's MLP computed at once: enough for full-speed GEMMs, few enough that the
// (rows, 4d) hidden state stays small.
inline constexpr Eigen::Index kEncoderMlpRows = 256;

// mel: (n_mels, 2 * n_audio_ctx) = one 30 s window. Returns (n_audio_ctx, d). The products run
// on `dense`; LayerNorm, GELU and the residual sums on the CPU.
inline RowMatrixXf encode(const WhisperWeights& w, const RowMatrixXf& mel, Dense& dense = default_dense()) {
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
  // The MLP acts on each row alone, so it runs on blocks of rows: its hidden state, the
  // encoder's largest activation (1500 x 4d floats, 9.2 MB for tiny), is never whole. One set of
  // block buffers serves every block and layer, so a block allocates nothing; its sums are those
  // of a fresh matrix's (the same rows, row stride and alignment).
  const Eigen::Index block = std::min(kEncoderMlpRows, x.rows());
  RowMatrixXf normed(block, x.cols()), hidden(block, w.encoder.empty() ? 0 : w.encoder.front().fc1.out_features()),
      mlp_out(block, x.cols());
  for (const EncoderBlock& b : w.encoder) {
    {  // qkv (1500, 3d) is freed before the MLP
      const RowMatrixXf qkv = dense.linear(layer_norm(x, b.attn_ln), b.qkv);
      x += dense.linear(dense.bidirectional_attention(qkv, d.n_audio_head), b.attn_out);
    }
    for (Eigen::Index first = 0; first < x.rows(); first += kEncoderMlpRows) {
      const Eigen::Index n = std::min(kEncoderMlpRows, x.rows() - first);
      auto rows = x.middleRows(first, n);
      layer_norm_into(rows, b.mlp_ln, normed.topRows(n));
      dense.linear_into(normed.topRows(n), b.fc1, hidden.topRows(n));
      gelu_inplace(hidden.topRows(n));
      dense.linear_into(hidden.topRows(n), b.fc2, mlp_out.topRows(n));
      rows += mlp_out.topRows(n);
    }
  }
  return layer_norm(x, w.encoder_ln);
}

}  // namespace polyattn::whisper
