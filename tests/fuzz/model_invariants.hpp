// Invariants of what the model loaders return, checked by the CT2 and ggml harnesses: every
// tensor holds as many elements as its shape's product, and the assembled weights have the sizes
// their dimensions say, within Whisper's architecture (the decoder and encoder index by them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <whisper/ct2_model.hpp>  // shape_string
#include <whisper/weights.hpp>

#include "harness.hpp"

namespace polyattn_fuzz {

// The product of `shape` equals `count` (computed here with overflow checks, independently of
// the loaders' own arithmetic).
inline void check_element_count(const std::string& what, const std::vector<std::int64_t>& shape, std::size_t count) {
  std::uint64_t product = 1;
  bool overflow = false;
  for (const std::int64_t d : shape) {
    if (d < 0) broken(what + " has a negative dimension in " + polyattn::whisper::shape_string(shape));
    overflow = overflow || __builtin_mul_overflow(product, static_cast<std::uint64_t>(d), &product);
  }
  if (overflow || product != count)
    broken(what + " has shape " + polyattn::whisper::shape_string(shape) + (overflow ? " (product overflows 64 bits)" : "") +
           " but holds " + std::to_string(count) + " elements");
}

// m: anything with rows() and cols() (an Eigen matrix, the token embedding).
template <class Matrix>
void check_matrix(const std::string& what, const Matrix& m, Eigen::Index rows, Eigen::Index cols) {
  if (m.rows() != rows || m.cols() != cols)
    broken(what + " is " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) + ", its dimensions say " +
           std::to_string(rows) + "x" + std::to_string(cols));
}

template <class Weight>
void check_linear(const std::string& what, const polyattn::whisper::BasicLinear<Weight>& l, Eigen::Index out, Eigen::Index in) {
  check_matrix(what + " weight", l.weight, out, in);
  if (l.bias.size() != out) broken(what + " bias has " + std::to_string(l.bias.size()) + " elements, expected " + std::to_string(out));
}

inline void check_weights(const polyattn::whisper::WhisperWeights& w) {
  const polyattn::whisper::WhisperDims& d = w.dims;
  if (d.n_audio_ctx != 1500) broken("audio context " + std::to_string(d.n_audio_ctx) + " accepted (Whisper's is 1500)");
  if (d.n_text_ctx < 1 || d.n_text_ctx > 448) broken("text context " + std::to_string(d.n_text_ctx) + " accepted (at most 448)");
  if (d.n_mels != 80 && d.n_mels != 128) broken(std::to_string(d.n_mels) + " mel bins accepted (80 or 128)");
  const Eigen::Index D = d.n_audio_state;
  if (D < 1 || d.n_text_state != D || d.n_audio_head < 1 || D % d.n_audio_head || d.n_text_head < 1 || D % d.n_text_head)
    broken("widths " + std::to_string(D) + "/" + std::to_string(d.n_text_state) + " with heads " + std::to_string(d.n_audio_head) +
           "/" + std::to_string(d.n_text_head) + " accepted");
  check_matrix("conv1", w.conv1_w, D, 3 * Eigen::Index{d.n_mels});
  check_matrix("conv2", w.conv2_w, D, 3 * D);
  check_matrix("encoder positions", w.encoder_positions, d.n_audio_ctx, D);
  check_matrix("token embedding", w.token_embedding, d.n_vocab, D);
  check_matrix("decoder positions", w.decoder_positions, d.n_text_ctx, D);
  if (w.encoder.size() != static_cast<std::size_t>(d.n_audio_layer) || w.decoder.size() != static_cast<std::size_t>(d.n_text_layer))
    broken("layer counts " + std::to_string(w.encoder.size()) + "/" + std::to_string(w.decoder.size()) + " differ from the dimensions " +
           std::to_string(d.n_audio_layer) + "/" + std::to_string(d.n_text_layer));
  for (const auto& b : w.encoder) {
    check_linear("encoder qkv", b.qkv, 3 * D, D);
    check_linear("encoder fc2", b.fc2, D, 4 * D);
  }
  for (const auto& b : w.decoder) {
    check_linear("decoder qkv", b.self_qkv, 3 * D, D);
    check_linear("decoder cross kv", b.cross_kv, 2 * D, D);
    check_linear("decoder fc2", b.fc2, D, 4 * D);
  }
}

}  // namespace polyattn_fuzz
