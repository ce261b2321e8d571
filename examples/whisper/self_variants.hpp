// The decoder self-attention kinds of the --self policies (SelfAttention<Kind, Layout> in
// self_attention.hpp). A Kind turns one pretrained Whisper layer into a polyattn Variant:
//
//   Kind::variant                 the polyattn Variant
//   Kind::cached_parts            how many matrices make its Rows ({k, v}: 2, {k}: 1, ...)
//   Kind::mha_fallback            whether a layer whose conversion is refused keeps MHA
//   Kind::name()                  the first half of the --self name
//   Kind::convert(block, dims, layer) -> SelfLayerWeights<variant>   (throws ConversionError)
//
//   mha      the pretrained layer as it is: K and V cached (2 d floats per token and layer)
//   slimk    slim attention option 2: K cached, V = K W_kv (d per token); exact up to rounding
//            that grows with cond(W_k). A layer whose W_k is too ill-conditioned for float
//            (tiny.en decoder layer 0: cond 2.4e6, predicted error 2.9%) keeps MHA.
//   xcache   the layer input x cached (d per token); K and V recomputed through the weights; exact
//   mla<R>   Whisper-MLA (decoupled-key placement: decoder self-attention only): a rank-R latent
//            from the joint SVD of [W_k | W_v] plus 2 frequency pairs per head kept exactly
//            (R + 4 n_heads per token). Not exact below full rank, and not fine-tuned here.
//
// The conversions that solve or decompose (slimk's inverse, xcache's products, mla's SVD) are
// compiled once, in self_variants.cpp: in every file that names a --self kind they cost ~25 s of
// compile time each (Eigen's SVD and LU instantiated).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <polyattn/convert/whisper_mla_weights.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "self_attention.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

namespace self_kind {

struct Mha {
  using variant = polyattn::Mha;
  static constexpr std::size_t cached_parts = 2;
  static constexpr bool mha_fallback = false;
  static std::string name() { return "mha"; }
  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int) { return mha_self_layer(b, d); }
};

struct SlimK {
  using variant = polyattn::SlimK2;
  static constexpr std::size_t cached_parts = 1;
  static constexpr bool mha_fallback = true;
  static std::string name() { return "slimk"; }

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int layer);  // self_variants.cpp
};

struct XCache {
  using variant = polyattn::XCache;
  static constexpr std::size_t cached_parts = 1;
  static constexpr bool mha_fallback = false;
  static std::string name() { return "xcache"; }

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int layer);  // self_variants.cpp
};

// One layer's Whisper-MLA conversion at any rank (self_variants.cpp): x -> [q' | latent | kept
// key dims] in one product, q' with its columns permuted as the keys' are; the up-projections in
// `weights`.
struct MlaSelfLayer {
  StoredLinear in;
  Eigen::Index q_width = 0;
  std::vector<Eigen::Index> parts;  // {rank, n_heads * kept dims}
  convert::WhisperMlaWeights weights;
  std::string note;
};
MlaSelfLayer convert_mla_self(const DecoderBlock& b, const WhisperDims& d, int layer, int rank, int kept_pairs);

template <int Rank>
struct Mla {
  static constexpr int kept_pairs = 2;  // per head, as the Whisper-MLA paper's default
  using variant = polyattn::Mla<Rank, 2 * kept_pairs, MlaKeyPart::preserved>;
  static constexpr std::size_t cached_parts = 2;
  static constexpr bool mha_fallback = false;
  static std::string name() { return "mla" + std::to_string(Rank); }

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int layer) {
    MlaSelfLayer m = convert_mla_self(b, d, layer, Rank, kept_pairs);
    SelfLayerWeights<variant> w;
    w.shape = self_attention_shape(d);
    w.in = owned(std::move(m.in));
    w.q_width = m.q_width;
    w.parts = std::move(m.parts);
    w.params = m.weights.template mla_params<variant>();
    w.out = borrowed(b.self_out);
    w.note = std::move(m.note);
    return w;
  }
};

}  // namespace self_kind
}  // namespace polyattn::whisper
