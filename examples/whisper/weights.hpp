// Whisper's weights in one format-independent struct, and the two loaders that fill it:
// CTranslate2 (WhisperSpec) and whisper.cpp ggml. Shapes are checked against dimensions
// derived from the model itself; a missing or misshapen tensor is a ModelError naming it.
// The loaders take the parsed file by value and move each tensor out of it as they convert it
// (take()). A file loaded from disk is mapped (mapped_file.hpp): each tensor is read once, where
// it is taken, and its pages leave the resident set when it has been copied, so that tiny.en
// loads at about the peak of its weights, not of them plus the file (152 MiB before, on the Xeon).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ct2_model.hpp"
#include "error.hpp"
#include "ggml_model.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "stored_floats.hpp"
#include "weight_matrix.hpp"

namespace polyattn::whisper {

struct WhisperDims {
  int n_mels = 80;
  int n_audio_ctx = 1500, n_audio_state = 384, n_audio_head = 6, n_audio_layer = 4;
  int n_vocab = 51864;
  int n_text_ctx = 448, n_text_state = 384, n_text_head = 6, n_text_layer = 4;
};

// What Whisper's architecture fixes: a window is 30 s, 3000 mel frames that the conv stem halves
// to 1500 encoder positions; the decoder has 448 learned positions; the front end makes 80 mel
// bins (128 in large-v3).
inline constexpr int kWhisperAudioContext = 1500;
inline constexpr int kWhisperTextContext = 448;

// Checks the dimensions read from a model file against the architecture before anything is sized
// from them (the sinusoids, the caches); `source` names the file. Widths, layer and vocabulary
// counts need no such bound: each sizes only tensors the file must hold in full.
inline void check_whisper_architecture(const WhisperDims& d, const std::string& source) {
  if (d.n_audio_ctx != kWhisperAudioContext)
    throw ModelError(source + ": audio context = " + std::to_string(d.n_audio_ctx) + ", Whisper's is " +
                     std::to_string(kWhisperAudioContext) + " (a 30 s window: 3000 mel frames, halved by the conv stem)");
  if (d.n_text_ctx < 1 || d.n_text_ctx > kWhisperTextContext)
    throw ModelError(source + ": text context = " + std::to_string(d.n_text_ctx) + " is not in [1, " +
                     std::to_string(kWhisperTextContext) + "]");
  if (d.n_mels != 80 && d.n_mels != 128)
    throw ModelError(source + ": " + std::to_string(d.n_mels) + " mel bins; Whisper's front end makes 80 or 128");
}

// Every linear layer keeps the precision the file stores it in (StoredLinear: float16 stays
// float16). The decoder's attention policies read theirs in float when they convert them
// (attention_weights.hpp, self_variants.hpp); the MHA projections they use as they are stay in
// the file's precision, as the MLP's do.
struct EncoderBlock {
  LayerNorm attn_ln;
  StoredLinear qkv;       // (3d, d): rows [q; k; v]; the k rows have zero bias
  StoredLinear attn_out;  // (d, d)
  LayerNorm mlp_ln;
  StoredLinear fc1, fc2;  // (4d, d), (d, 4d)
};

struct DecoderBlock {
  LayerNorm self_ln;
  StoredLinear self_qkv;  // (3d, d): rows [q; k; v]
  StoredLinear self_out;
  LayerNorm cross_ln;
  StoredLinear cross_q;   // (d, d)
  StoredLinear cross_kv;  // (2d, d): rows [k; v], applied to the encoder output
  StoredLinear cross_out;
  LayerNorm mlp_ln;
  StoredLinear fc1, fc2;  // (4d, d), (d, 4d)
};

struct WhisperWeights {
  WhisperDims dims;
  RowMatrixXf conv1_w;  // (d, 3 * n_mels), k-major (layers.hpp conv1d_k3)
  RowVectorXf conv1_b;
  RowMatrixXf conv2_w;  // (d, 3 * d)
  RowVectorXf conv2_b;
  RowMatrixXf encoder_positions;  // (n_audio_ctx, d), sinusoidal
  std::vector<EncoderBlock> encoder;
  LayerNorm encoder_ln;
  WeightMatrix token_embedding;  // (n_vocab, d); also the output projection (tied); float16 when shipped so
  RowMatrixXf decoder_positions;  // (n_text_ctx, d), learned
  std::vector<DecoderBlock> decoder;
  LayerNorm decoder_ln;
};

namespace detail {

// The loaders checked the shapes: `s` holds rows * cols elements.
inline RowMatrixXf to_matrix(const StoredFloats& s, Eigen::Index rows, Eigen::Index cols) {
  RowMatrixXf m(rows, cols);
  s.to_float(m.data());
  return m;
}
inline RowVectorXf to_vector(const StoredFloats& s) {
  RowVectorXf v(static_cast<Eigen::Index>(s.size()));
  s.to_float(v.data());
  return v;
}
// A matrix in the precision the file stores it in: float16 stays float16 (copied, not
// converted); float32 and bfloat16 become float.
inline WeightMatrix to_weight_matrix(const StoredFloats& s, Eigen::Index rows, Eigen::Index cols) {
  if (s.precision() == StoredFloats::Precision::float16) {
    WeightMatrix::HalfMatrix h(rows, cols);
    s.copy_halfs(h.data());
    return WeightMatrix(std::move(h));
  }
  return WeightMatrix(to_matrix(s, rows, cols));
}
// Conv1d weights (out, in, 3) in PyTorch order, as layers.hpp conv1d_k3 wants them (k-major).
inline RowMatrixXf to_conv_weight(const StoredFloats& s, Eigen::Index out, Eigen::Index in) {
  return conv_weight_k_major(s.to_float().data(), out, in);
}

// Stacks linears row-wise: [a; b; ...] (for fused q/k/v projections).
inline StoredLinear stack(const std::vector<StoredLinear>& parts) {
  std::vector<const WeightMatrix*> weights;
  Eigen::Index rows = 0;
  for (const auto& p : parts) weights.push_back(&p.weight), rows += p.weight.rows();
  StoredLinear out{WeightMatrix::stacked(weights), RowVectorXf(rows)};
  Eigen::Index r = 0;
  for (const auto& p : parts) out.bias.segment(r, p.bias.size()) = p.bias, r += p.bias.size();
  return out;
}

inline int count_layers(const auto& has_prefix, const std::string& stem) {
  int n = 0;
  while (has_prefix(stem + std::to_string(n))) ++n;
  return n;
}

}  // namespace detail

// ---- CTranslate2 -------------------------------------------------------------------

inline WhisperWeights weights_from_ct2(Ct2ModelBin m) {
  if (m.spec_name != "WhisperSpec")
    throw UnsupportedError("model.bin: spec '" + m.spec_name + "' is not a Whisper model (expected WhisperSpec)");
  WhisperWeights w;
  WhisperDims& d = w.dims;
  {
    const auto& conv1 = m.get("encoder/conv1/weight");
    const auto& emb = m.get("decoder/embeddings/weight");
    const auto& pos = m.get("decoder/position_encodings/encodings");
    if (conv1.shape.size() != 3 || emb.shape.size() != 2 || pos.shape.size() != 2)
      throw ModelError("model.bin: unexpected ranks of conv1 " + shape_string(conv1.shape) + ", embeddings " +
                       shape_string(emb.shape) + " or decoder positions " + shape_string(pos.shape));
    // The dimensions size everything built below (computed sinusoids, mel filters) and must
    // fit an int: a zero-volume tensor of shape [2^31, 0] passes the byte-count check of
    // the parser, so bound them here as the ggml reader bounds its hparams.
    auto dim = [](const Ct2Variable& v, std::size_t axis, const char* what) {
      const std::int64_t n = v.shape[axis];
      if (n < 1 || n > (1 << 20))
        throw ModelError("model.bin: " + std::string(what) + " = " + std::to_string(n) + " (from '" + v.name + "' of shape " +
                         shape_string(v.shape) + ") is not in [1, 2^20]");
      return static_cast<int>(n);
    };
    d.n_audio_state = dim(conv1, 0, "encoder width");
    d.n_mels = dim(conv1, 1, "mel bins");
    d.n_vocab = dim(emb, 0, "vocabulary size");
    d.n_text_state = dim(emb, 1, "decoder width");
    d.n_text_ctx = dim(pos, 0, "text context");
    // Only the length of the stored encoder positions is used (they are recomputed as sinusoids).
    d.n_audio_ctx = kWhisperAudioContext;
    if (m.contains("encoder/position_encodings/encodings")) {
      const auto& enc_pos = m.get("encoder/position_encodings/encodings");
      if (enc_pos.shape.size() != 2)
        throw ModelError("model.bin: encoder positions have shape " + shape_string(enc_pos.shape) + ", expected rank 2");
      d.n_audio_ctx = dim(enc_pos, 0, "audio context");
    }
  }
  check_whisper_architecture(d, "model.bin");
  auto has_prefix = [&](const std::string& p) { return m.contains(p + "/ffn/linear_0/weight"); };
  d.n_audio_layer = detail::count_layers(has_prefix, "encoder/layer_");
  d.n_text_layer = detail::count_layers(has_prefix, "decoder/layer_");
  d.n_audio_head = static_cast<int>(m.contains("encoder/num_heads") ? m.scalar_int("encoder/num_heads") : d.n_audio_state / 64);
  d.n_text_head = static_cast<int>(m.contains("decoder/num_heads") ? m.scalar_int("decoder/num_heads") : d.n_text_state / 64);
  if (d.n_audio_layer == 0 || d.n_text_layer == 0) throw ModelError("model.bin: no encoder or decoder layers found");
  if (d.n_audio_head <= 0 || d.n_audio_state % d.n_audio_head || d.n_text_head <= 0 || d.n_text_state % d.n_text_head)
    throw ModelError("model.bin: head counts " + std::to_string(d.n_audio_head) + "/" + std::to_string(d.n_text_head) +
                     " do not divide the widths " + std::to_string(d.n_audio_state) + "/" + std::to_string(d.n_text_state));
  if (d.n_audio_state != d.n_text_state)
    throw ModelError("model.bin: encoder width " + std::to_string(d.n_audio_state) + " differs from decoder width " +
                     std::to_string(d.n_text_state));
  // CTranslate2 Whisper flags this code relies on: pre-norm blocks, GELU, unscaled embeddings.
  if (m.contains("decoder/activation") && m.scalar_int("decoder/activation") != 3)
    throw UnsupportedError("model.bin: decoder/activation = " + std::to_string(m.scalar_int("decoder/activation")) +
                           ", only 3 (GELU) is supported");
  if (m.contains("decoder/pre_norm") && m.scalar_int("decoder/pre_norm") != 1)
    throw UnsupportedError("model.bin: decoder/pre_norm = 0 is not Whisper");
  if (m.contains("decoder/scale_embeddings") && m.scalar_int("decoder/scale_embeddings") != 0)
    throw UnsupportedError("model.bin: decoder/scale_embeddings = 1 is not Whisper");

  const std::int64_t D = d.n_audio_state;
  auto mat = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    return detail::to_matrix(m.take(name, {rows, cols}), rows, cols);
  };
  auto vec = [&](const std::string& name, std::int64_t n) { return detail::to_vector(m.take(name, {n})); };
  auto bias = [&](const std::string& p, std::int64_t out) {
    return m.contains(p + "/bias") ? vec(p + "/bias", out) : RowVectorXf(RowVectorXf::Zero(out));
  };
  auto stored_lin = [&](const std::string& p, std::int64_t out, std::int64_t in) {
    return StoredLinear{detail::to_weight_matrix(m.take(p + "/weight", {out, in}), out, in), bias(p, out)};
  };
  auto ln = [&](const std::string& p) { return LayerNorm{vec(p + "/gamma", D), vec(p + "/beta", D)}; };

  w.conv1_w = detail::to_conv_weight(m.take("encoder/conv1/weight", {D, d.n_mels, 3}), D, d.n_mels);
  w.conv1_b = vec("encoder/conv1/bias", D);
  w.conv2_w = detail::to_conv_weight(m.take("encoder/conv2/weight", {D, D, 3}), D, D);
  w.conv2_b = vec("encoder/conv2/bias", D);
  w.encoder_positions = sinusoids(d.n_audio_ctx, D);
  for (int i = 0; i < d.n_audio_layer; ++i) {
    const std::string p = "encoder/layer_" + std::to_string(i);
    w.encoder.push_back({ln(p + "/self_attention/layer_norm"), stored_lin(p + "/self_attention/linear_0", 3 * D, D),
                         stored_lin(p + "/self_attention/linear_1", D, D), ln(p + "/ffn/layer_norm"),
                         stored_lin(p + "/ffn/linear_0", 4 * D, D), stored_lin(p + "/ffn/linear_1", D, 4 * D)});
  }
  w.encoder_ln = ln("encoder/layer_norm");
  w.token_embedding = detail::to_weight_matrix(m.take("decoder/embeddings/weight", {d.n_vocab, D}), d.n_vocab, D);
  w.decoder_positions = mat("decoder/position_encodings/encodings", d.n_text_ctx, D);
  for (int i = 0; i < d.n_text_layer; ++i) {
    const std::string p = "decoder/layer_" + std::to_string(i);
    w.decoder.push_back({ln(p + "/self_attention/layer_norm"), stored_lin(p + "/self_attention/linear_0", 3 * D, D),
                         stored_lin(p + "/self_attention/linear_1", D, D), ln(p + "/attention/layer_norm"),
                         stored_lin(p + "/attention/linear_0", D, D), stored_lin(p + "/attention/linear_1", 2 * D, D),
                         stored_lin(p + "/attention/linear_2", D, D), ln(p + "/ffn/layer_norm"),
                         stored_lin(p + "/ffn/linear_0", 4 * D, D), stored_lin(p + "/ffn/linear_1", D, 4 * D)});
  }
  w.decoder_ln = ln("decoder/layer_norm");
  return w;
}

// ---- whisper.cpp ggml (PyTorch names) ----------------------------------------------

inline WhisperWeights weights_from_ggml(GgmlModel g) {
  WhisperWeights w;
  WhisperDims& d = w.dims;
  const GgmlHparams& h = g.hparams;
  d = {h.n_mels, h.n_audio_ctx, h.n_audio_state, h.n_audio_head, h.n_audio_layer, h.n_vocab,
       h.n_text_ctx, h.n_text_state, h.n_text_head, h.n_text_layer};
  check_whisper_architecture(d, "ggml");
  if (d.n_audio_state != d.n_text_state || d.n_audio_state % d.n_audio_head || d.n_text_state % d.n_text_head)
    throw ModelError("ggml: inconsistent widths/heads in hparams");
  const std::int64_t D = d.n_audio_state;

  // Tensor by name with its PyTorch shape checked, taken; trailing size-1 dimensions (whisper.cpp
  // stores conv biases as (d, 1)) are ignored.
  auto take = [&](const std::string& name, std::vector<std::int64_t> shape) {
    const GgmlTensor& t = g.tensor(name);
    std::vector<std::int64_t> s = t.shape();
    while (s.size() > shape.size() && s.back() == 1) s.pop_back();
    if (s != shape)
      throw ModelError("ggml: tensor '" + name + "' has shape " + shape_string(t.shape()) + ", expected " +
                       shape_string(shape));
    return g.take(name);
  };
  auto mat = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
    return detail::to_matrix(take(name, {rows, cols}), rows, cols);
  };
  auto vec = [&](const std::string& name, std::int64_t n) { return detail::to_vector(take(name, {n})); };
  auto bias = [&](const std::string& p, std::int64_t out, bool has_bias) {
    return has_bias ? vec(p + ".bias", out) : RowVectorXf(RowVectorXf::Zero(out));
  };
  auto stored_lin = [&](const std::string& p, std::int64_t out, std::int64_t in, bool has_bias = true) {
    return StoredLinear{detail::to_weight_matrix(take(p + ".weight", {out, in}), out, in), bias(p, out, has_bias)};
  };
  auto ln = [&](const std::string& p) { return LayerNorm{vec(p + ".weight", D), vec(p + ".bias", D)}; };
  auto stored_attn = [&](const std::string& p) {
    return detail::stack({stored_lin(p + ".query", D, D), stored_lin(p + ".key", D, D, false), stored_lin(p + ".value", D, D)});
  };

  w.conv1_w = detail::to_conv_weight(take("encoder.conv1.weight", {D, d.n_mels, 3}), D, d.n_mels);
  w.conv1_b = vec("encoder.conv1.bias", D);
  w.conv2_w = detail::to_conv_weight(take("encoder.conv2.weight", {D, D, 3}), D, D);
  w.conv2_b = vec("encoder.conv2.bias", D);
  w.encoder_positions = sinusoids(d.n_audio_ctx, D);
  for (int i = 0; i < d.n_audio_layer; ++i) {
    const std::string p = "encoder.blocks." + std::to_string(i);
    w.encoder.push_back({ln(p + ".attn_ln"), stored_attn(p + ".attn"), stored_lin(p + ".attn.out", D, D), ln(p + ".mlp_ln"),
                         stored_lin(p + ".mlp.0", 4 * D, D), stored_lin(p + ".mlp.2", D, 4 * D)});
  }
  w.encoder_ln = ln("encoder.ln_post");
  w.token_embedding = detail::to_weight_matrix(take("decoder.token_embedding.weight", {d.n_vocab, D}), d.n_vocab, D);
  w.decoder_positions = mat("decoder.positional_embedding", d.n_text_ctx, D);
  for (int i = 0; i < d.n_text_layer; ++i) {
    const std::string p = "decoder.blocks." + std::to_string(i);
    w.decoder.push_back({ln(p + ".attn_ln"), stored_attn(p + ".attn"), stored_lin(p + ".attn.out", D, D), ln(p + ".cross_attn_ln"),
                         stored_lin(p + ".cross_attn.query", D, D),
                         detail::stack({stored_lin(p + ".cross_attn.key", D, D, false), stored_lin(p + ".cross_attn.value", D, D)}),
                         stored_lin(p + ".cross_attn.out", D, D), ln(p + ".mlp_ln"), stored_lin(p + ".mlp.0", 4 * D, D),
                         stored_lin(p + ".mlp.2", D, 4 * D)});
  }
  w.decoder_ln = ln("decoder.ln");
  return w;
}

}  // namespace polyattn::whisper
