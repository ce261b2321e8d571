// Memory accounting of the encoder-decoder cache options from the model shape alone,
// reproducing the slim-attention seed's Whisper table (counts of activations/parameters, not
// bytes; multiply by the element size). Per sequence:
//   E-cache  p d                 cross KV  2 p d L           self KV  2 n d L
//   baseline = cross KV + self KV;  option 1 (K-only self and cross) = baseline / 2;
//   option 2 (E-cache, assumed to stay on chip, + K-only self) = self KV / 2
//   params (generate phase): baseline d vocab + L (6 d^2 + 2 d d_ffn); option 1 + d^2 L (W_kv);
//   option 2 + 2 d^2 L (cross W_k and W_v read every step)
//   reads per token at batch B = cache + params / B; speedup = baseline reads / option reads
// The hybrid (not in the seed's table): option 2's cache with K_0 instead of E, and layer 0
// reads W_kv0 instead of W_k0 and W_v0: option 2 params - d^2.
#pragma once

#include <array>

namespace polyattn {

struct EncoderDecoderShape {
  const char* name = "";
  int d_model = 0;
  int layers = 0;  ///< decoder layers (the encoder has as many)
  int d_ffn = 0;
  int vocab = 51865;
  int encoder_tokens = 1500;  ///< p
  int decoder_tokens = 448;   ///< n, the decoder context
};

inline constexpr std::array<EncoderDecoderShape, 5> kWhisperShapes = {{
    {"tiny", 384, 4, 1536},
    {"base", 512, 6, 2048},
    {"small", 768, 12, 3072},
    {"medium", 1024, 24, 4096},
    {"large", 1280, 32, 5120},
}};

struct CrossCacheMemory {
  double e_cache, cross_kv, self_kv;         // cache parts
  double baseline, option1, option2, hybrid; // cache per option
  double params_baseline, params_option1, params_option2, params_hybrid;

  /// Memory reads per generated token at batch `batch`: cache + params / batch.
  constexpr double reads_baseline(int batch) const { return baseline + params_baseline / batch; }
  constexpr double reads_option1(int batch) const { return option1 + params_option1 / batch; }
  constexpr double reads_option2(int batch) const { return option2 + params_option2 / batch; }
  constexpr double reads_hybrid(int batch) const { return hybrid + params_hybrid / batch; }
  constexpr double option2_savings() const { return baseline / option2; }
  constexpr double option1_speedup(int batch) const { return reads_baseline(batch) / reads_option1(batch); }
  constexpr double option2_speedup(int batch) const { return reads_baseline(batch) / reads_option2(batch); }
  constexpr double hybrid_speedup(int batch) const { return reads_baseline(batch) / reads_hybrid(batch); }
};

constexpr CrossCacheMemory cross_cache_memory(const EncoderDecoderShape& s) {
  const double d = s.d_model, L = s.layers, p = s.encoder_tokens, n = s.decoder_tokens;
  CrossCacheMemory m{};
  m.e_cache = p * d;
  m.cross_kv = 2 * p * d * L;
  m.self_kv = 2 * n * d * L;
  m.baseline = m.cross_kv + m.self_kv;
  m.option1 = m.baseline / 2;
  m.option2 = m.self_kv / 2;
  m.hybrid = m.option2;
  m.params_baseline = d * s.vocab + L * (6 * d * d + 2 * d * s.d_ffn);
  m.params_option1 = m.params_baseline + d * d * L;
  m.params_option2 = m.params_baseline + 2 * d * d * L;
  m.params_hybrid = m.params_option2 - d * d;
  return m;
}

}  // namespace polyattn
