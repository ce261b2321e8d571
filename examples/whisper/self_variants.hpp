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
#pragma once

#include <cstddef>
#include <string>

#include <polyattn/convert/slim_k.hpp>
#include <polyattn/convert/whisper_mla.hpp>
#include <polyattn/convert/x_cache.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "attention_weights.hpp"
#include "self_attention.hpp"

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

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int layer) {
    const Eigen::Index e = d.n_text_state;
    SlimKWeights slim = convert_to_slim_k(self_attention_weights(b), {.layer = layer});
    SelfLayerWeights<variant> w;
    w.shape = self_attention_shape(d);
    // [q | k]: the key bias is dropped (it shifts every score of a query equally; Whisper's is 0).
    StoredLinear in{b.self_qkv.weight.rows_copy(0, 2 * e), RowVectorXf::Zero(2 * e)};
    in.bias.head(e) = b.self_qkv.bias.head(e);
    w.in = owned(std::move(in));
    w.q_width = e;
    w.parts = {e};
    w.params.w_kv = std::move(slim.w_kv);
    w.out = owned({b.self_out.weight, slim.b_o});  // b_o' = b_v W_o + b_o carries the value bias
    w.note = slim.report.summary();
    return w;
  }
};

struct XCache {
  using variant = polyattn::XCache;
  static constexpr std::size_t cached_parts = 1;
  static constexpr bool mha_fallback = false;
  static std::string name() { return "xcache"; }

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int) {
    SelfLayerWeights<variant> w;
    w.shape = self_attention_shape(d);
    w.parts = {d.n_text_state};  // no input projection: queries and cache rows are x
    w.params = make_x_cache_params(self_attention_weights(b), w.shape);
    w.out = borrowed(b.self_out);
    return w;
  }
};

template <int Rank>
struct Mla {
  static constexpr int kept_pairs = 2;  // per head, as the Whisper-MLA paper's default
  using variant = polyattn::Mla<Rank, 2 * kept_pairs, MlaKeyPart::preserved>;
  static constexpr std::size_t cached_parts = 2;
  static constexpr bool mha_fallback = false;
  static std::string name() { return "mla" + std::to_string(Rank); }

  static SelfLayerWeights<variant> convert(const DecoderBlock& b, const WhisperDims& d, int layer) {
    const MhaWeights src = self_attention_weights(b);
    const AttentionShape shape = self_attention_shape(d);
    const convert::WhisperMlaDecomposition decomposition(
        src, shape, convert::select_kept_pairs(src, shape, kept_pairs, convert::KeepSelection::uniform, {}));
    const convert::WhisperMlaWeights c = decomposition.truncate(Rank);
    const Eigen::Index e = d.n_text_state, kept = c.w_kp.cols();
    SelfLayerWeights<variant> w;
    w.shape = shape;
    // [q' | latent | kept key dims], q' with its columns permuted as the keys' are.
    RowMatrixXf in(e + Rank + kept, d.n_text_state);
    in.topRows(e) = c.w_q.transpose().cast<float>();
    in.middleRows(e, Rank) = c.w_dkv.transpose().cast<float>();
    in.bottomRows(kept) = c.w_kp.transpose().cast<float>();
    RowVectorXf in_bias = RowVectorXf::Zero(e + Rank + kept);
    if (c.b_q.size() > 0) in_bias.head(e) = c.b_q.cast<float>();
    w.in = owned({WeightMatrix(std::move(in)), std::move(in_bias)});
    w.q_width = e;
    w.parts = {Rank, kept};
    w.params = c.template mla_params<variant>();
    w.out = borrowed(b.self_out);
    w.note = "layer " + std::to_string(layer) + ": latent rank " + std::to_string(Rank) + " + " + std::to_string(2 * kept_pairs) +
             " kept key dims per head; relative weight error of [W_k | W_v] " + std::to_string(decomposition.weight_error(Rank));
    return w;
  }
};

}  // namespace self_kind
}  // namespace polyattn::whisper
