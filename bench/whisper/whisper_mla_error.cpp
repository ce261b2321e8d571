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

#include <whisper/attention_weights.hpp>
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

void sweep(const char* title, const MhaWeights& w, AttentionShape shape, const Eigen::MatrixXd& x, int kept_pairs,
           std::initializer_list<int> ranks) {
  const int mha_elems = 2 * w.width(), kept = 2 * kept_pairs * shape.n_heads;
  std::printf("\n%s (d_model %d, %d heads x %d, keep %d pairs/head = %d dims)\n", title, w.model_dim(), shape.n_heads, shape.head_dim,
              kept_pairs, kept);
  std::printf("| selection | rank | cache/token | reduction | weight err | K err | V err | KV err | output err |\n|---|---|---|---|---|---|---|---|---|\n");
  for (KeepSelection sel : {KeepSelection::uniform, KeepSelection::two_norm}) {
    const WhisperMlaDecomposition dec(w, shape, select_kept_pairs(w, shape, kept_pairs, sel, x));
    for (int r : ranks) {
      if (r > dec.max_rank()) continue;
      const ConversionReport e = measure_conversion(w, shape, dec.truncate(r), x);
      std::printf("| %s | %d | %d | %.1f%% | %.4f | %.4f | %.4f | %.4f | %.4f |\n", sel == KeepSelection::uniform ? "uniform" : "2-norm", r,
                  r + kept, 100.0 * (1.0 - double(r + kept) / mha_elems), dec.weight_error(r), e.key, e.value, e.kv, e.output);
    }
  }
}

/// Random MHA weights of `heads` heads of 64 (W_o from its own stream: it is not converted).
MhaWeights random_mha(int heads, int d_model, std::mt19937& rng, int true_rank) {
  MhaWeights w;
  const int width = heads * 64;
  const double s = 1.0 / std::sqrt(double(d_model));
  w.w_q = gaussian(d_model, width, rng, s).cast<float>();
  if (true_rank > 0) {
    const Eigen::MatrixXd basis = gaussian(d_model, true_rank, rng, s);
    w.w_k = (basis * gaussian(true_rank, width, rng, 1.0 / std::sqrt(double(true_rank))) + gaussian(d_model, width, rng, 0.05 * s)).cast<float>();
    w.w_v = (basis * gaussian(true_rank, width, rng, 1.0 / std::sqrt(double(true_rank))) + gaussian(d_model, width, rng, 0.05 * s)).cast<float>();
  } else {
    w.w_k = gaussian(d_model, width, rng, s).cast<float>();
    w.w_v = gaussian(d_model, width, rng, s).cast<float>();
  }
  std::mt19937 rng_o(11);
  w.w_o = gaussian(width, d_model, rng_o, 1.0 / std::sqrt(double(width))).cast<float>();
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937 rng(7);
  const Eigen::MatrixXd x = gaussian(256, 768, rng, 1.0);
  const auto ranks = {24, 48, 96, 192, 384, 576, 768};
  const AttentionShape small{12, 64, 768};
  sweep("Whisper-small shape, random Gaussian weights", random_mha(12, 768, rng, 0), small, x, 2, ranks);
  sweep("Whisper-small shape, structured weights (K, V from a shared 96-dim subspace + 5% noise)", random_mha(12, 768, rng, 96), small, x, 2,
        ranks);

  if (argc > 1) {
    const whisper::WhisperWeights ww = whisper::weights_from_ct2(whisper::load_ct2_model_dir(argv[1]).model);
    const int d = ww.dims.n_text_state, heads = ww.dims.n_text_head, T = 256;
    std::uniform_int_distribution<int> token(0, 50256);  // text tokens
    RowMatrixXf h(T, d);
    for (int t = 0; t < T; ++t) h.row(t) = ww.token_embedding.as_float().row(token(rng)) + ww.decoder_positions.row(t);
    for (std::size_t l = 0; l < ww.decoder.size(); ++l) {
      const whisper::DecoderBlock& b = ww.decoder[l];
      const Eigen::MatrixXd xl = whisper::layer_norm(h, b.self_ln).cast<double>();
      const MhaWeights w = whisper::self_attention_weights(b);  // x·W from the (out, in) Linear weights
      const AttentionShape shape{heads, d / heads, d};
      const std::string title = "tiny.en decoder layer " + std::to_string(l) + " self-attention" + (l == 0 ? "" : " (proxy inputs)");
      sweep(title.c_str(), w, shape, xl, 2, {12, 24, 48, 96, 192, 384});
      if (l == 0)  // the same weights on isotropic inputs: how much of the error is the input distribution
        sweep("tiny.en decoder layer 0 self-attention, isotropic Gaussian inputs", w, shape, gaussian(T, d, rng, 1.0), 2,
              {12, 24, 48, 96, 192, 384});
    }
  }
  return 0;
}
