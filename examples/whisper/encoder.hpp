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

// Every activation of one window lives in one block, allocated once per window and carved into
// the views each stage needs (floats, tiny's shapes: T = 3000 mel frames, n = 1500, d = 384):
//   x                     (n, d)                       the residual stream, conv2 to the end
//   then, reusing one region in turn:
//     conv1:  stem (T, d) | frames (T, n_mels) | im2col (T, 3 n_mels)
//     conv2:  stem (T, d) | im2col (n, 3d)                              <- the largest: 2.9 M
//     layers: normed, then the attention's output (n, d) | qkv, then attn_out's (n, 3d) | MLP hidden (256, 4d)
// 15 MB for tiny. Why one block: freed one by one, the stages' many-MB buffers fragmented glibc's
// heap around the decoder's long-lived buffers, so that from a list's second file on the encoder's
// peak stood 10-20 MiB above its live bytes (examples/whisper/README.md).
class EncoderActivations {
 public:
  using View = Eigen::Map<RowMatrixXf>;

  EncoderActivations(const WhisperDims& d, Eigen::Index mlp_width) : d_(d), mlp_width_(mlp_width) {
    const Eigen::Index conv1 = frames_t() * (d.n_audio_state + 4 * Eigen::Index(d.n_mels));
    const Eigen::Index conv2 = frames_t() * d.n_audio_state + n() * 3 * d.n_audio_state;
    const Eigen::Index layers = n() * 4 * d.n_audio_state + mlp_rows() * mlp_width;
    block_.resize(n() * d.n_audio_state + std::max({conv1, conv2, layers}));
  }

  View x() { return at(0, n(), d_.n_audio_state); }
  View stem() { return at(region(), frames_t(), d_.n_audio_state); }
  View frames() { return at(region() + frames_t() * d_.n_audio_state, frames_t(), d_.n_mels); }
  View conv1_columns() { return at(region() + frames_t() * (d_.n_audio_state + d_.n_mels), frames_t(), 3 * Eigen::Index(d_.n_mels)); }
  View conv2_columns() { return at(region() + frames_t() * d_.n_audio_state, n(), 3 * d_.n_audio_state); }
  View normed() { return at(region(), n(), d_.n_audio_state); }
  View qkv() { return at(region() + n() * d_.n_audio_state, n(), 3 * d_.n_audio_state); }
  View hidden() { return at(region() + n() * 4 * d_.n_audio_state, mlp_rows(), mlp_width_); }
  Eigen::Index mlp_rows() const { return std::min(kEncoderMlpRows, n()); }

 private:
  Eigen::Index n() const { return d_.n_audio_ctx; }
  Eigen::Index frames_t() const { return 2 * Eigen::Index(d_.n_audio_ctx); }
  Eigen::Index region() const { return n() * d_.n_audio_state; }
  View at(Eigen::Index offset, Eigen::Index rows, Eigen::Index cols) { return View(block_.data() + offset, rows, cols); }

  WhisperDims d_;
  Eigen::Index mlp_width_;
  Eigen::VectorXf block_;  // Eigen's alignment, as the separate matrices had: every view starts at a multiple of 16 floats
};

// mel: (n_mels, 2 * n_audio_ctx) = one 30 s window. Returns (n_audio_ctx, d). The products run
// on `dense`; LayerNorm, GELU and the residual sums on the CPU.
inline RowMatrixXf encode(const WhisperWeights& w, const RowMatrixXf& mel, Dense& dense = default_dense()) {
  const WhisperDims& d = w.dims;
  if (mel.rows() != d.n_mels || mel.cols() != 2 * d.n_audio_ctx)
    throw Error("encode: mel window is " + std::to_string(mel.rows()) + "x" + std::to_string(mel.cols()) +
                ", expected " + std::to_string(d.n_mels) + "x" + std::to_string(2 * d.n_audio_ctx));
  RowMatrixXf features(d.n_audio_ctx, d.n_audio_state);  // outlives the block: allocated before it
  EncoderActivations a(d, w.encoder.empty() ? 0 : w.encoder.front().fc1.out_features());
  a.frames() = mel.transpose();  // (T, n_mels), time-major
  dense.conv1d_k3_into(a.frames(), w.conv1_w, w.conv1_b, 1, a.conv1_columns(), a.stem());  // (T, d)
  gelu_inplace(a.stem());
  auto x = a.x();
  dense.conv1d_k3_into(a.stem(), w.conv2_w, w.conv2_b, 2, a.conv2_columns(), x);  // (n, d)
  gelu_inplace(x);
  x += w.encoder_positions;
  // The MLP acts on each row alone, so it runs on blocks of rows: its hidden state, the
  // encoder's largest activation (1500 x 4d floats, 9.2 MB for tiny), is never whole.
  auto normed = a.normed(), qkv = a.qkv(), hidden = a.hidden();
  const Eigen::Index block = a.mlp_rows();
  for (const EncoderBlock& b : w.encoder) {
    layer_norm_into(x, b.attn_ln, normed);
    dense.linear_into(normed, b.qkv, qkv);
    auto attended = normed;                    // normed is spent once qkv is made
    auto projected = qkv.leftCols(x.cols());   // and qkv once the attention has run
    dense.bidirectional_attention_into(qkv, d.n_audio_head, attended);
    dense.linear_into(attended, b.attn_out, projected);
    x += projected;
    for (Eigen::Index first = 0; first < x.rows(); first += block) {
      const Eigen::Index rows = std::min(block, x.rows() - first);
      auto in = x.middleRows(first, rows);
      auto normed_rows = normed.topRows(rows);
      auto mlp_out = qkv.topRows(rows).leftCols(x.cols());
      layer_norm_into(in, b.mlp_ln, normed_rows);
      dense.linear_into(normed_rows, b.fc1, hidden.topRows(rows));
      gelu_inplace(hidden.topRows(rows));
      dense.linear_into(hidden.topRows(rows), b.fc2, mlp_out);
      in += mlp_out;
    }
  }
  layer_norm_into(x, w.encoder_ln, features);
  return features;
}

}  // namespace polyattn::whisper
