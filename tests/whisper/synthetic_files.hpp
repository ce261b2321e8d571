// Writers of small synthetic input files for the Whisper tests and the fuzz seed corpus
// (tests/fuzz/make_seed_corpus.cpp): CTranslate2 model.bin, whisper.cpp ggml, RIFF/WAVE, a
// byte-level vocabulary, and a random-weight Whisper-shaped model (one layer each) in both model
// formats. The *_bytes writers return Bytes, to extend; the other names the byte vector to parse.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include <whisper/ggml_model.hpp>
#include <whisper/tokenizer.hpp>

#include "test_bytes.hpp"

namespace whisper_test {

using polyattn::whisper::kGgmlMagic;

// IEEE binary16 bits of f, rounded to nearest even (Eigen::half: clang before 15 has no _Float16
// on x86).
inline std::uint16_t half_bits(float f) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(f)); }

// ---- CTranslate2 model.bin ----------------------------------------------------------

inline void ct2_string(Bytes& b, const std::string& s) {
  b.put<std::uint16_t>(static_cast<std::uint16_t>(s.size() + 1)).str(s).put<std::uint8_t>(0);
}

struct Ct2Var {
  std::string name;
  std::vector<std::uint32_t> shape;
  std::uint8_t dtype;
  std::vector<std::uint8_t> data;
};

inline Bytes ct2_bytes(const std::vector<Ct2Var>& vars, const std::vector<std::pair<std::string, std::string>>& aliases,
                       std::uint32_t version = 6) {
  Bytes b;
  b.put<std::uint32_t>(version);
  ct2_string(b, "WhisperSpec");
  b.put<std::uint32_t>(3).put<std::uint32_t>(static_cast<std::uint32_t>(vars.size()));
  for (const auto& v : vars) {
    ct2_string(b, v.name);
    b.put<std::uint8_t>(static_cast<std::uint8_t>(v.shape.size()));
    for (auto d : v.shape) b.put(d);
    b.put(v.dtype).put<std::uint32_t>(static_cast<std::uint32_t>(v.data.size())).raw(v.data.data(), v.data.size());
  }
  b.put<std::uint32_t>(static_cast<std::uint32_t>(aliases.size()));
  for (const auto& [a, t] : aliases) {
    ct2_string(b, a);
    ct2_string(b, t);
  }
  return b;
}

inline std::vector<std::uint8_t> write_ct2(const std::vector<Ct2Var>& vars,
                                           const std::vector<std::pair<std::string, std::string>>& aliases,
                                           std::uint32_t version = 6) {
  return ct2_bytes(vars, aliases, version).b;
}

template <class T>
inline std::vector<std::uint8_t> raw(const std::vector<T>& v) {
  Bytes b;
  for (const T& x : v) b.put(x);
  return b.b;
}

// A few variables of each dtype family and an alias: the format's features in ~200 bytes.
inline Bytes small_ct2_bytes() {
  return ct2_bytes({{"decoder/embeddings/weight", {2, 3}, 4, raw<std::uint16_t>({0x3C00, 0xC000, 0x3800, 0, 0x7BFF, 0x8001})},
                    {"encoder/conv1/bias", {4}, 0, raw<float>({1.5f, -2.0f, 0.25f, 8.0f})},
                    {"encoder/num_heads", {}, 2, raw<std::int16_t>({6})},
                    {"decoder/activation", {}, 1, raw<std::int8_t>({3})}},
                   {{"decoder/projection/weight", "decoder/embeddings/weight"}});
}

inline std::vector<std::uint8_t> small_ct2() { return small_ct2_bytes().b; }

// ---- whisper.cpp ggml ---------------------------------------------------------------

// A tensor of a synthetic ggml file: ggml dimensions (ne[0] fastest), ggml type (0 f32, 1 f16:
// `data` rounded to float16 as it is written; others have no writer and are the reader's to refuse).
struct GgmlTensorSpec {
  std::string name;
  std::vector<std::int64_t> ne;
  std::int32_t type = 0;
  std::vector<float> data;
};

// A ggml file with small hparams (ftype f16), a 3x2 filter bank, three tokens and `tensors`.
inline Bytes ggml_bytes(const std::vector<GgmlTensorSpec>& tensors) {
  Bytes b;
  b.put<std::uint32_t>(kGgmlMagic);
  for (std::int32_t v : {50300, 8, 4, 2, 1, 6, 4, 2, 1, 3, 1}) b.put(v);  // small hparams, ftype f16
  b.put<std::int32_t>(3).put<std::int32_t>(2);
  for (float f : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) b.put(f);
  b.put<std::int32_t>(3);
  for (const std::string t : {"a", " b", "\xC3\xA9"}) b.put<std::uint32_t>(static_cast<std::uint32_t>(t.size())).str(t);
  for (const auto& t : tensors) {
    b.put<std::int32_t>(static_cast<std::int32_t>(t.ne.size()))
        .put<std::int32_t>(static_cast<std::int32_t>(t.name.size()))
        .put<std::int32_t>(t.type);
    for (auto ne : t.ne) b.put<std::int32_t>(static_cast<std::int32_t>(ne));
    b.str(t.name);
    for (float f : t.data) {
      if (t.type == 0) b.put(f);
      else b.raw(std::array<std::uint16_t, 1>{half_bits(f)}.data(), 2);
    }
  }
  return b;
}

inline std::vector<std::uint8_t> write_ggml(const std::vector<GgmlTensorSpec>& tensors) { return ggml_bytes(tensors).b; }

// ---- RIFF/WAVE ----------------------------------------------------------------------

// A WAV file with one fmt chunk (plain or EXTENSIBLE), an unrelated LIST chunk, and data.
inline Bytes wav_bytes(int tag, int channels, int rate, int bits, const std::vector<std::uint8_t>& data,
                       bool extensible = false) {
  Bytes fmt;
  const int block = channels * bits / 8;
  fmt.put<std::uint16_t>(static_cast<std::uint16_t>(extensible ? 0xFFFE : tag))
      .put<std::uint16_t>(static_cast<std::uint16_t>(channels))
      .put<std::uint32_t>(static_cast<std::uint32_t>(rate))
      .put<std::uint32_t>(static_cast<std::uint32_t>(rate * block))
      .put<std::uint16_t>(static_cast<std::uint16_t>(block))
      .put<std::uint16_t>(static_cast<std::uint16_t>(bits));
  if (extensible) {
    const std::uint8_t guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    fmt.put<std::uint16_t>(22).put<std::uint16_t>(static_cast<std::uint16_t>(bits)).put<std::uint32_t>(3);
    fmt.put<std::uint16_t>(static_cast<std::uint16_t>(tag)).raw(guid_tail, 14);
  }
  Bytes w;
  w.str("RIFF").put<std::uint32_t>(0).str("WAVE");
  w.str("fmt ").put<std::uint32_t>(static_cast<std::uint32_t>(fmt.b.size())).raw(fmt.b.data(), fmt.b.size());
  w.str("LIST").put<std::uint32_t>(3).str("abc").put<std::uint8_t>(0);  // odd size: pad byte
  w.str("data").put<std::uint32_t>(static_cast<std::uint32_t>(data.size())).raw(data.data(), data.size());
  const auto riff_size = static_cast<std::uint32_t>(w.b.size() - 8);
  std::memcpy(&w.b[4], &riff_size, 4);
  return w;
}

inline std::vector<std::uint8_t> make_wav(int tag, int channels, int rate, int bits, const std::vector<std::uint8_t>& data,
                                          bool extensible = false) {
  return wav_bytes(tag, channels, rate, bits, data, extensible).b;
}

inline std::vector<std::uint8_t> pcm16(const std::vector<std::int16_t>& s) {
  Bytes b;
  for (auto v : s) b.put(v);
  return b.b;
}

// ---- vocabulary -----------------------------------------------------------------------

// A byte-level vocabulary (CTranslate2's vocabulary files): the 256 byte tokens of GPT-2's
// alphabet (each a code point below U+0144, so one or two UTF-8 bytes), then Whisper's special
// tokens.
inline std::vector<std::string> byte_level_vocabulary() {
  std::vector<std::string> v;
  for (const char32_t cp : polyattn::whisper::gpt2_byte_to_unicode()) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    v.push_back(s);
  }
  for (const char* s : {"<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                        "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>", "<|0.00|>", "<|0.02|>"})
    v.push_back(s);
  return v;
}

// ---- random-weight Whisper-shaped model (PyTorch names, then ggml and CT2 forms) ----

// A random Whisper-shaped model (d = 8, 2 heads, one layer each) under PyTorch names.
struct TinyTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // PyTorch order
  std::vector<float> data;
};

inline std::vector<TinyTensor> tiny_pytorch_model(whisper_test::Rng& rng, int n_vocab, int d) {
  std::vector<TinyTensor> t;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = rng.normal_ish() * 0.5f;
    t.push_back({name, std::move(shape), std::move(v)});
  };
  auto ln = [&](const std::string& p) { add(p + ".weight", {d}); add(p + ".bias", {d}); };
  auto lin = [&](const std::string& p, std::int64_t out, std::int64_t in, bool bias = true) {
    add(p + ".weight", {out, in});
    if (bias) add(p + ".bias", {out});
  };
  auto attn = [&](const std::string& p) {
    lin(p + ".query", d, d);
    lin(p + ".key", d, d, false);
    lin(p + ".value", d, d);
    lin(p + ".out", d, d);
  };
  add("encoder.conv1.weight", {d, 80, 3});
  add("encoder.conv1.bias", {d, 1});  // whisper.cpp stores conv biases as (d, 1)
  add("encoder.conv2.weight", {d, d, 3});
  add("encoder.conv2.bias", {d, 1});
  add("encoder.positional_embedding", {1500, d});
  ln("encoder.blocks.0.attn_ln");
  attn("encoder.blocks.0.attn");
  ln("encoder.blocks.0.mlp_ln");
  lin("encoder.blocks.0.mlp.0", 4 * d, d);
  lin("encoder.blocks.0.mlp.2", d, 4 * d);
  ln("encoder.ln_post");
  add("decoder.token_embedding.weight", {n_vocab, d});
  add("decoder.positional_embedding", {448, d});
  ln("decoder.blocks.0.attn_ln");
  attn("decoder.blocks.0.attn");
  ln("decoder.blocks.0.cross_attn_ln");
  attn("decoder.blocks.0.cross_attn");
  ln("decoder.blocks.0.mlp_ln");
  lin("decoder.blocks.0.mlp.0", 4 * d, d);
  lin("decoder.blocks.0.mlp.2", d, 4 * d);
  ln("decoder.ln");
  return t;
}

// `float16`: names of the tensors stored as f16 (the others f32).
inline Bytes tiny_ggml_bytes(const std::vector<TinyTensor>& tensors, int n_vocab, int d, const std::vector<std::string>& float16 = {}) {
  Bytes b;
  b.put<std::uint32_t>(kGgmlMagic);
  for (std::int32_t v : {n_vocab, 1500, d, 2, 1, 448, d, 2, 1, 80, 0}) b.put(v);
  b.put<std::int32_t>(1).put<std::int32_t>(1).put(0.0f);  // a 1x1 filter bank (unused)
  b.put<std::int32_t>(2);
  for (const std::string tok : {"a", "b"}) b.put<std::uint32_t>(1).str(tok);
  for (const auto& t : tensors) {
    const bool f16 = std::find(float16.begin(), float16.end(), t.name) != float16.end();
    b.put<std::int32_t>(static_cast<std::int32_t>(t.shape.size()))
        .put<std::int32_t>(static_cast<std::int32_t>(t.name.size()))
        .put<std::int32_t>(f16 ? 1 : 0);
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) b.put<std::int32_t>(static_cast<std::int32_t>(*it));
    b.str(t.name);
    for (float f : t.data) {
      if (f16) b.raw(std::array<std::uint16_t, 1>{half_bits(f)}.data(), 2);
      else b.put(f);
    }
  }
  return b;
}

inline std::vector<std::uint8_t> tiny_ggml(const std::vector<TinyTensor>& tensors, int n_vocab, int d,
                                           const std::vector<std::string>& float16 = {}) {
  return tiny_ggml_bytes(tensors, n_vocab, d, float16).b;
}

// The same model under CTranslate2 WhisperSpec names (fused q/k/v, zero key bias), as the
// variable list (float32 tensors, then the int16 head counts) that ct2_bytes serialises.
inline std::vector<Ct2Var> tiny_ct2_vars(const std::vector<TinyTensor>& tensors) {
  std::map<std::string, const TinyTensor*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t;
  struct Var {
    std::string name;
    std::vector<std::uint32_t> shape;
    std::vector<float> data;
  };
  std::vector<Var> vars;
  auto copy = [&](const std::string& ct2, const std::string& pt) {
    const TinyTensor& t = *by_name.at(pt);
    std::vector<std::uint32_t> shape;
    for (auto s : t.shape) shape.push_back(static_cast<std::uint32_t>(s));
    if (shape.size() == 2 && shape[1] == 1) shape.pop_back();  // conv biases are 1-D in CT2
    vars.push_back({ct2, shape, t.data});
  };
  auto ln = [&](const std::string& ct2, const std::string& pt) {
    copy(ct2 + "/gamma", pt + ".weight");
    copy(ct2 + "/beta", pt + ".bias");
  };
  auto fused = [&](const std::string& ct2, const std::vector<std::string>& parts) {
    std::uint32_t rows = 0, cols = 0;
    for (const auto& p : parts) {
      rows += static_cast<std::uint32_t>(by_name.at(p + ".weight")->shape[0]);
      cols = static_cast<std::uint32_t>(by_name.at(p + ".weight")->shape[1]);
    }
    Var w{ct2 + "/weight", {rows, cols}, {}};
    Var b{ct2 + "/bias", {rows}, {}};
    for (const auto& p : parts) {
      const TinyTensor& pw = *by_name.at(p + ".weight");
      w.data.insert(w.data.end(), pw.data.begin(), pw.data.end());
      const auto it = by_name.find(p + ".bias");
      if (it != by_name.end()) b.data.insert(b.data.end(), it->second->data.begin(), it->second->data.end());
      else b.data.insert(b.data.end(), static_cast<std::size_t>(pw.shape[0]), 0.0f);  // Whisper's key: no bias
    }
    vars.push_back(std::move(w));
    vars.push_back(std::move(b));
  };
  auto lin = [&](const std::string& ct2, const std::string& pt) { fused(ct2, {pt}); };
  copy("encoder/conv1/weight", "encoder.conv1.weight");
  copy("encoder/conv1/bias", "encoder.conv1.bias");
  copy("encoder/conv2/weight", "encoder.conv2.weight");
  copy("encoder/conv2/bias", "encoder.conv2.bias");
  copy("encoder/position_encodings/encodings", "encoder.positional_embedding");
  ln("encoder/layer_0/self_attention/layer_norm", "encoder.blocks.0.attn_ln");
  fused("encoder/layer_0/self_attention/linear_0",
        {"encoder.blocks.0.attn.query", "encoder.blocks.0.attn.key", "encoder.blocks.0.attn.value"});
  lin("encoder/layer_0/self_attention/linear_1", "encoder.blocks.0.attn.out");
  ln("encoder/layer_0/ffn/layer_norm", "encoder.blocks.0.mlp_ln");
  lin("encoder/layer_0/ffn/linear_0", "encoder.blocks.0.mlp.0");
  lin("encoder/layer_0/ffn/linear_1", "encoder.blocks.0.mlp.2");
  ln("encoder/layer_norm", "encoder.ln_post");
  copy("decoder/embeddings/weight", "decoder.token_embedding.weight");
  copy("decoder/position_encodings/encodings", "decoder.positional_embedding");
  ln("decoder/layer_0/self_attention/layer_norm", "decoder.blocks.0.attn_ln");
  fused("decoder/layer_0/self_attention/linear_0",
        {"decoder.blocks.0.attn.query", "decoder.blocks.0.attn.key", "decoder.blocks.0.attn.value"});
  lin("decoder/layer_0/self_attention/linear_1", "decoder.blocks.0.attn.out");
  ln("decoder/layer_0/attention/layer_norm", "decoder.blocks.0.cross_attn_ln");
  lin("decoder/layer_0/attention/linear_0", "decoder.blocks.0.cross_attn.query");
  fused("decoder/layer_0/attention/linear_1", {"decoder.blocks.0.cross_attn.key", "decoder.blocks.0.cross_attn.value"});
  lin("decoder/layer_0/attention/linear_2", "decoder.blocks.0.cross_attn.out");
  ln("decoder/layer_0/ffn/layer_norm", "decoder.blocks.0.mlp_ln");
  lin("decoder/layer_0/ffn/linear_0", "decoder.blocks.0.mlp.0");
  lin("decoder/layer_0/ffn/linear_1", "decoder.blocks.0.mlp.2");
  ln("decoder/layer_norm", "decoder.ln");

  std::vector<Ct2Var> out;
  for (const auto& v : vars) {
    Bytes data;
    for (float f : v.data) data.put(f);
    out.push_back({v.name, v.shape, 0, std::move(data.b)});
  }
  for (const std::string name : {"encoder/num_heads", "decoder/num_heads"})
    out.push_back({name, {}, 2, raw<std::int16_t>({2})});
  return out;
}

// A ggml Whisper model (d = 8, vocabulary 51864, English-only special ids) whose logits are the
// same at every step: decoder.ln maps every state to ones (gamma 0, beta 1), so the logit of a
// token is the sum of its embedding row. Token 1 ("b") sums to 16, above every random row (eight
// entries below 1.5 in magnitude); <|endoftext|> (50256) sums to `eot_sum`: below 16 it is never
// sampled, above it ends every window at its second token (the first step suppresses it).
inline std::vector<std::uint8_t> fixed_output_ggml(float eot_sum) {
  constexpr int n_vocab = 51864, d = 8, b = 1, eot = 50256;
  Rng rng(21);
  std::vector<TinyTensor> tensors = tiny_pytorch_model(rng, n_vocab, d);
  for (TinyTensor& t : tensors) {
    if (t.name == "decoder.ln.weight") std::fill(t.data.begin(), t.data.end(), 0.0f);
    if (t.name == "decoder.ln.bias") std::fill(t.data.begin(), t.data.end(), 1.0f);
    if (t.name == "decoder.token_embedding.weight") {  // (n_vocab, d)
      std::fill_n(t.data.begin() + b * d, d, 2.0f);
      std::fill_n(t.data.begin() + eot * d, d, eot_sum / d);
    }
  }
  return tiny_ggml(tensors, n_vocab, d);
}

// fixed_output_ggml(-2) with two timestamps made likelier than every text token: <|0.20|>
// (<|0.00|> is 50363 in English-only vocabularies; +10) sums to 18 and <|2.00|> (+100) to 17.
// Under the timestamp rules each window then reads <|0.20|> b <|2.00|> <|2.00|> b b ...: the
// first token a timestamp, the pair closed, then text, since no later timestamp is likely.
inline std::vector<std::uint8_t> timestamped_ggml() {
  constexpr int n_vocab = 51864, d = 8, b = 1, eot = 50256, begin = 50363;
  Rng rng(21);
  std::vector<TinyTensor> tensors = tiny_pytorch_model(rng, n_vocab, d);
  for (TinyTensor& t : tensors) {
    if (t.name == "decoder.ln.weight") std::fill(t.data.begin(), t.data.end(), 0.0f);
    if (t.name == "decoder.ln.bias") std::fill(t.data.begin(), t.data.end(), 1.0f);
    if (t.name == "decoder.token_embedding.weight") {  // (n_vocab, d): logit = the row's sum
      std::fill_n(t.data.begin() + b * d, d, 2.0f);
      std::fill_n(t.data.begin() + eot * d, d, -2.0f);
      std::fill_n(t.data.begin() + (begin + 10) * d, d, 18.0f / d);
      std::fill_n(t.data.begin() + (begin + 100) * d, d, 17.0f / d);
    }
  }
  return tiny_ggml(tensors, n_vocab, d);
}

// The model.bin's one alias: the output projection is tied to the token embedding.
inline const std::vector<std::pair<std::string, std::string>> kTinyCt2Aliases = {
    {"decoder/projection/weight", "decoder/embeddings/weight"}};

inline Bytes tiny_ct2_bytes(const std::vector<TinyTensor>& tensors) { return ct2_bytes(tiny_ct2_vars(tensors), kTinyCt2Aliases); }

inline std::vector<std::uint8_t> tiny_ct2(const std::vector<TinyTensor>& tensors) { return tiny_ct2_bytes(tensors).b; }

}  // namespace whisper_test
