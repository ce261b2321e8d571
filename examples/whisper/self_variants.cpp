// The --self kinds' conversions that solve or decompose (self_variants.hpp): compiled once here,
// for every executable and test that builds a decoder.
#include "self_variants.hpp"

#include <polyattn/convert/slim_k.hpp>
#include <polyattn/convert/whisper_mla.hpp>
#include <polyattn/convert/x_cache.hpp>

#include "attention_weights.hpp"

namespace polyattn::whisper::self_kind {

SelfLayerWeights<SlimK::variant> SlimK::convert(const DecoderBlock& b, const WhisperDims& d, int layer) {
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

SelfLayerWeights<XCache::variant> XCache::convert(const DecoderBlock& b, const WhisperDims& d, int) {
  SelfLayerWeights<variant> w;
  w.shape = self_attention_shape(d);
  w.parts = {d.n_text_state};  // no input projection: queries and cache rows are x
  w.params = make_x_cache_params(self_attention_weights(b), w.shape);
  w.out = borrowed(b.self_out);
  return w;
}

MlaSelfLayer convert_mla_self(const DecoderBlock& b, const WhisperDims& d, int layer, int rank, int kept_pairs) {
  const MhaWeights src = self_attention_weights(b);
  const AttentionShape shape = self_attention_shape(d);
  const convert::WhisperMlaDecomposition decomposition(
      src, shape, convert::select_kept_pairs(src, shape, kept_pairs, convert::KeepSelection::uniform, {}));
  MlaSelfLayer m;
  m.weights = decomposition.truncate(rank);
  const convert::WhisperMlaWeights& c = m.weights;
  const Eigen::Index e = d.n_text_state, kept = c.w_kp.cols();
  RowMatrixXf in(e + rank + kept, d.n_text_state);
  in.topRows(e) = c.w_q.transpose().cast<float>();
  in.middleRows(e, rank) = c.w_dkv.transpose().cast<float>();
  in.bottomRows(kept) = c.w_kp.transpose().cast<float>();
  RowVectorXf in_bias = RowVectorXf::Zero(e + rank + kept);
  if (c.b_q.size() > 0) in_bias.head(e) = c.b_q.cast<float>();
  m.in = {WeightMatrix(std::move(in)), std::move(in_bias)};
  m.q_width = e;
  m.parts = {rank, kept};
  m.note = "layer " + std::to_string(layer) + ": latent rank " + std::to_string(rank) + " + " + std::to_string(2 * kept_pairs) +
           " kept key dims per head; relative weight error of [W_k | W_v] " + std::to_string(decomposition.weight_error(rank));
  return m;
}

}  // namespace polyattn::whisper::self_kind
