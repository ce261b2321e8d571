// whisper.cpp ggml model reader (the legacy single-file .bin, magic "ggml").
//
// Layout (little-endian):
//   u32 magic 0x67676d6c
//   i32 hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
//                n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
//   i32 n_mel, i32 n_fft, f32 mel_filters[n_mel * n_fft]      (row-major (n_mel, n_fft))
//   i32 n_tokens, n_tokens x { u32 length, bytes }             (raw UTF-8 bytes, not byte-level;
//                                                               whisper.cpp's converter wrote tokens
//                                                               that are partial UTF-8 as U+FFFD)
//   tensors until end of file:
//     i32 n_dims, i32 name_length, i32 type, i32 ne[n_dims], name, data
//   ne[0] is the fastest-varying dimension (ggml order), so the PyTorch shape is ne
//   reversed; type 0 = f32, 1 = f16 (quantized types are refused). Tensors keep the precision
//   they are stored in (stored_floats.hpp) until the weights take them (GgmlModel::take).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>  // also Eigen::half

#include "byte_reader.hpp"
#include "checked_size.hpp"
#include "error.hpp"
#include "mapped_file.hpp"
#include "matrix.hpp"
#include "stored_floats.hpp"

namespace polyattn::whisper {

inline constexpr std::uint32_t kGgmlMagic = 0x67676d6c;  // "ggml" read as little-endian u32

struct GgmlHparams {
  std::int32_t n_vocab = 0, n_audio_ctx = 0, n_audio_state = 0, n_audio_head = 0, n_audio_layer = 0;
  std::int32_t n_text_ctx = 0, n_text_state = 0, n_text_head = 0, n_text_layer = 0, n_mels = 0, ftype = 0;
};

struct GgmlTensor {
  std::string name;
  std::vector<std::int64_t> ne;  // ggml order: ne[0] fastest
  std::int32_t type = 0;         // 0 f32, 1 f16 in the file
  StoredFloats elements;         // as stored; empty once taken (GgmlModel::take)

  std::vector<float> values() const { return elements.to_float(); }

  // PyTorch-order shape (outermost first).
  std::vector<std::int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

enum class GgmlLoad { full, header_only };

struct GgmlModel {
  GgmlHparams hparams;
  RowMatrixXf mel_filters;  // (n_mel, n_fft)
  std::vector<std::string> vocabulary;  // raw bytes of tokens 0 .. n_tokens-1
  std::map<std::string, GgmlTensor> tensors;

  const GgmlTensor& tensor(const std::string& name) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw ModelError("ggml: unknown tensor '" + name + "'");
    return it->second;
  }

  // The tensor's elements, moved out (the tensor keeps its name, type and shape): the weights
  // never hold a second copy of the file's tensors.
  StoredFloats take(const std::string& name) {
    GgmlTensor& t = const_cast<GgmlTensor&>(tensor(name));
    if (!shape_volume(t.ne) || t.elements.size() != *shape_volume(t.ne)) throw ModelError("ggml: tensor '" + name + "' was already taken");
    return std::exchange(t.elements, StoredFloats{});
  }
};

// Parses a ggml file. With GgmlLoad::full a file without tensors (such as whisper.cpp's
// for-tests-ggml-*.bin, which holds only the header, filters and vocabulary) is refused
// with ModelError; GgmlLoad::header_only stops after the vocabulary.
// `file`: the mapping `bytes` lies in (each tensor is then a view of it, stored_floats.hpp), or
// empty to copy each tensor out of `bytes`.
inline GgmlModel parse_ggml(std::span<const std::uint8_t> bytes, GgmlLoad mode, const std::string& what,
                            const std::shared_ptr<const MappedFile>& file) {
  ByteReader r(bytes, what);
  const std::uint32_t magic = r.read<std::uint32_t>("magic");
  if (magic != kGgmlMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    r.fail(std::string("bad magic ") + hex + ", expected 0x67676d6c ('ggml')");
  }
  GgmlModel m;
  GgmlHparams& h = m.hparams;
  std::int32_t* fields[] = {&h.n_vocab, &h.n_audio_ctx, &h.n_audio_state, &h.n_audio_head, &h.n_audio_layer, &h.n_text_ctx,
                            &h.n_text_state, &h.n_text_head, &h.n_text_layer, &h.n_mels, &h.ftype};
  static const char* names[] = {"n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_text_ctx",
                                "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype"};
  for (int i = 0; i < 11; ++i) {
    *fields[i] = r.read<std::int32_t>(names[i]);
    if (*fields[i] < 0 || (i < 10 && (*fields[i] == 0 || *fields[i] > (1 << 20))))
      r.fail(std::string("hparam ") + names[i] + " = " + std::to_string(*fields[i]) + " is out of range");
  }
  const std::int32_t ftype = h.ftype % 1000;  // whisper.cpp folds a quantization version in as ftype + 1000 * qver
  if (ftype != 0 && ftype != 1)
    throw UnsupportedError(what + ": ftype " + std::to_string(h.ftype) + " is quantized; only f32 (0) and f16 (1) are supported");

  const std::int32_t n_mel = r.read<std::int32_t>("n_mel"), n_fft = r.read<std::int32_t>("n_fft");
  if (n_mel <= 0 || n_fft <= 0 || n_mel > 1024 || n_fft > 65536)
    r.fail("mel filter shape " + std::to_string(n_mel) + "x" + std::to_string(n_fft) + " is out of range");
  const auto filt = r.bytes(static_cast<std::size_t>(n_mel) * static_cast<std::size_t>(n_fft) * 4, "mel filters");
  m.mel_filters.resize(n_mel, n_fft);
  std::memcpy(m.mel_filters.data(), filt.data(), filt.size());

  const std::int32_t n_tokens = r.read<std::int32_t>("token count");
  if (n_tokens < 0 || n_tokens > h.n_vocab)
    r.fail("token count " + std::to_string(n_tokens) + " is not in [0, n_vocab = " + std::to_string(h.n_vocab) + "]");
  for (std::int32_t i = 0; i < n_tokens; ++i) {
    const std::uint32_t len = r.read<std::uint32_t>("token length");
    m.vocabulary.push_back(r.string(len, "token bytes"));
  }
  if (mode == GgmlLoad::header_only) return m;

  while (!r.at_end()) {
    GgmlTensor t;
    const std::int32_t n_dims = r.read<std::int32_t>("tensor n_dims");
    const std::int32_t name_len = r.read<std::int32_t>("tensor name length");
    t.type = r.read<std::int32_t>("tensor type");
    if (n_dims < 1 || n_dims > 4) r.fail("tensor n_dims " + std::to_string(n_dims) + " is not in [1, 4]");
    if (name_len < 1 || name_len > 4096) r.fail("tensor name length " + std::to_string(name_len) + " is not in [1, 4096]");
    for (int d = 0; d < n_dims; ++d) {
      const std::int32_t ne = r.read<std::int32_t>("tensor dimension");
      if (ne < 1) r.fail("tensor dimension " + std::to_string(ne) + " is not positive");
      t.ne.push_back(ne);
    }
    t.name = r.string(static_cast<std::size_t>(name_len), "tensor name");
    if (t.type != 0 && t.type != 1)
      throw UnsupportedError(what + ": tensor '" + t.name + "' has ggml type " + std::to_string(t.type) +
                             "; only f32 (0) and f16 (1) are supported");
    const std::optional<std::uint64_t> numel = shape_volume(t.ne);
    const std::optional<std::uint64_t> n_bytes = numel ? checked_mul(*numel, t.type == 0 ? 4 : 2) : std::nullopt;
    if (!n_bytes)
      r.fail("tensor '" + t.name + "' has shape " + shape_string(t.shape()) + ", whose size does not fit in 64 bits");
    const auto data = r.bytes(static_cast<std::size_t>(*n_bytes), "tensor data of '" + t.name + "'");
    const std::size_t n = static_cast<std::size_t>(*numel);  // the bytes are there: n is bounded by the file
    const auto precision = t.type == 0 ? StoredFloats::Precision::float32 : StoredFloats::Precision::float16;
    t.elements = StoredFloats::view_or_copy(file, data.data(), n, precision);
    const std::string name = t.name;
    if (!m.tensors.emplace(name, std::move(t)).second) r.fail("duplicate tensor '" + name + "'");
  }
  if (m.tensors.empty())
    throw ModelError(what + ": the file has no tensors (a header-only test file?); load it with GgmlLoad::header_only");
  return m;
}

inline GgmlModel parse_ggml(std::span<const std::uint8_t> bytes, GgmlLoad mode = GgmlLoad::full,
                            const std::string& what = "ggml file") {
  return parse_ggml(bytes, mode, what, std::shared_ptr<const MappedFile>());
}

// The file is mapped, not read: each tensor is read once, where the weights take it.
inline GgmlModel load_ggml(const std::string& path, GgmlLoad mode = GgmlLoad::full) {
  const auto file = std::make_shared<const MappedFile>(path);
  return parse_ggml(file->bytes(), mode, path, file);
}

}  // namespace polyattn::whisper
