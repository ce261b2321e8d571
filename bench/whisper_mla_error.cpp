// Whisper-MLA conversion error against latent rank: relative error of K, V, [K V] and of the
// causal self-attention output on calibration inputs, and the cache reduction each rank buys.
//   whisper_mla_error                 Whisper-small shape (12 heads x 64, d_model 768) with random
//                                     and with structured (low-rank + noise) weights
//   whisper_mla_error <ct2 tiny.en>   also the real decoder self-attention weights of tiny.en;
//                                     calibration: LN_l(token embedding + position) of 256 tokens
//                                     (the true input of layer 0; a proxy for deeper layers)
#include <cstdio>
#include <random>
#include <string>

#include <polyattn/convert/whisper_mla.hpp>

#include <whisper/weights.hpp>

using namespace polyattn;
using namespace polyattn::convert;

namespace {

Eigen::MatrixXd gaussian(int rows, int cols, std::mt19937& rng, double sigma) {
  std::normal_distribution<double> dist(0.0, sigma);
  Eigen::MatrixXd m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = dist(rng);
  return m;
}

void sweep(const char* title, const MlaSourceWeights& w, const Eigen::MatrixXd& x, int kept_pairs, std::initializer_list<int> ranks) {
  const int mha_elems = 2 * w.width(), kept = 2 * kept_pairs * w.n_heads;
  std::printf("\n%s (d_model %d, %d heads x %d, keep %d pairs/head = %d dims)\n", title, w.model_dim(), w.n_heads, w.head_dim, kept_pairs,
              kept);
  std::printf("| selection | rank | cache/token | reduction | weight err | K err | V err | KV err | output err |\n|---|---|---|---|---|---|---|---|---|\n");
  for (KeepSelection sel : {KeepSelection::uniform, KeepSelection::two_norm}) {
    const WhisperMlaDecomposition dec(w, select_kept_pairs(w, kept_pairs, sel, x));
    for (int r : ranks) {
      if (r > dec.max_rank()) continue;
      const ConversionReport e = measure_conversion(w, dec.truncate(r), x);
      std::printf("| %s | %d | %d | %.1f%% | %.4f | %.4f | %.4f | %.4f | %.4f |\n", sel == KeepSelection::uniform ? "uniform" : "2-norm", r,
                  r + kept, 100.0 * (1.0 - double(r + kept) / mha_elems), dec.weight_error(r), e.key, e.value, e.kv, e.output);
    }
  }
}

MlaSourceWeights random_mha(int heads, int d_model, std::mt19937& rng, int true_rank) {
  MlaSourceWeights w;
  w.n_heads = heads;
  w.head_dim = 64;
  const int width = heads * 64;
  const double s = 1.0 / std::sqrt(double(d_model));
  w.w_q = gaussian(d_model, width, rng, s);
  if (true_rank > 0) {
    const Eigen::MatrixXd basis = gaussian(d_model, true_rank, rng, s);
    w.w_k = basis * gaussian(true_rank, width, rng, 1.0 / std::sqrt(double(true_rank))) + gaussian(d_model, width, rng, 0.05 * s);
    w.w_v = basis * gaussian(true_rank, width, rng, 1.0 / std::sqrt(double(true_rank))) + gaussian(d_model, width, rng, 0.05 * s);
  } else {
    w.w_k = gaussian(d_model, width, rng, s);
    w.w_v = gaussian(d_model, width, rng, s);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937 rng(7);
  const Eigen::MatrixXd x = gaussian(256, 768, rng, 1.0);
  const auto ranks = {24, 48, 96, 192, 384, 576, 768};
  sweep("Whisper-small shape, random Gaussian weights", random_mha(12, 768, rng, 0), x, 2, ranks);
  sweep("Whisper-small shape, structured weights (K, V from a shared 96-dim subspace + 5% noise)", random_mha(12, 768, rng, 96), x, 2, ranks);

  if (argc > 1) {
    const whisper::WhisperWeights ww = whisper::weights_from_ct2(whisper::load_ct2_model_dir(argv[1]).model);
    const int d = ww.dims.n_text_state, heads = ww.dims.n_text_head, T = 256;
    std::uniform_int_distribution<int> token(0, 50256);  // text tokens
    RowMatrixXf h(T, d);
    for (int t = 0; t < T; ++t) h.row(t) = ww.token_embedding.row(token(rng)) + ww.decoder_positions.row(t);
    for (std::size_t l = 0; l < ww.decoder.size(); ++l) {
      const whisper::DecoderBlock& b = ww.decoder[l];
      const Eigen::MatrixXd xl = whisper::layer_norm(h, b.self_ln).cast<double>();
      MlaSourceWeights w;
      w.n_heads = heads;
      w.head_dim = d / heads;
      // Linear weights are (out, in) with rows [q; k; v]: x W = x weightᵀ.
      w.w_q = b.self_qkv.weight.topRows(d).transpose().cast<double>();
      w.w_k = b.self_qkv.weight.middleRows(d, d).transpose().cast<double>();
      w.w_v = b.self_qkv.weight.bottomRows(d).transpose().cast<double>();
      w.b_q = b.self_qkv.bias.head(d).cast<double>();
      w.b_v = b.self_qkv.bias.tail(d).cast<double>();
      const std::string title = "tiny.en decoder layer " + std::to_string(l) + " self-attention" + (l == 0 ? "" : " (proxy inputs)");
      sweep(title.c_str(), w, xl, 2, {12, 24, 48, 96, 192, 384});
      if (l == 0)  // the same weights on isotropic inputs: how much of the error is the input distribution
        sweep("tiny.en decoder layer 0 self-attention, isotropic Gaussian inputs", w, gaussian(T, d, rng, 1.0), 2,
              {12, 24, 48, 96, 192, 384});
    }
  }
  return 0;
}
