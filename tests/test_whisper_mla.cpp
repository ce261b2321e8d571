// Whisper-MLA conversion: kept-pair selection, per-head permutation, joint SVD. At full rank the
// converted Mla reproduces MHA to rounding (in double through measure_conversion, in fp32 through
// Attention<Mla, ...>); below it the error falls as the rank grows, on random and on structured
// (low-rank + noise) weights.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <polyattn/convert/whisper_mla.hpp>
#include <polyattn/polyattn.hpp>

#include "support/latent_oracle.hpp"
#include "support/check_throws.hpp"

using namespace polyattn;
using namespace polyattn::testing;
using namespace polyattn::convert;

namespace {

Eigen::MatrixXd gaussian(int rows, int cols, std::mt19937& rng, double sigma = 1.0) {
  std::normal_distribution<double> dist(0.0, sigma);
  Eigen::MatrixXd m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = dist(rng);
  return m;
}

RowMatrixXf gaussian_f(int rows, int cols, std::mt19937& rng, double sigma = 1.0) { return gaussian(rows, cols, rng, sigma).cast<float>(); }

/// The shape of the layers below: 4 heads of 16, d_model 64.
const AttentionShape kShape{4, 16, 64};

/// Random MHA weights scaled like a trained layer (x W has entries of order 1 for x of order 1).
MhaWeights random_mha(int n_heads, int head_dim, int d_model, std::mt19937& rng) {
  MhaWeights w;
  const double sigma = 1.0 / std::sqrt(double(d_model));
  w.w_q = gaussian_f(d_model, n_heads * head_dim, rng, sigma);
  w.w_k = gaussian_f(d_model, n_heads * head_dim, rng, sigma);
  w.w_v = gaussian_f(d_model, n_heads * head_dim, rng, sigma);
  w.b_q = gaussian_f(1, n_heads * head_dim, rng, 0.1);
  w.b_v = gaussian_f(1, n_heads * head_dim, rng, 0.1);
  std::mt19937 rng_o(7);  // W_o is not converted; its own stream leaves the draws of the rest as they were
  w.w_o = gaussian_f(n_heads * head_dim, d_model, rng_o, 1.0 / std::sqrt(double(n_heads * head_dim)));
  return w;
}

/// Weights in double, as the conversion reads them.
Eigen::MatrixXd dbl(const RowMatrixXf& m) { return m.cast<double>(); }
Eigen::RowVectorXd dbl(const Eigen::RowVectorXf& v) { return v.cast<double>(); }

/// Keys and values read one shared `true_rank` subspace of the input, plus small noise: what MLA's
/// shared latent can capture exactly.
MhaWeights structured_mha(int n_heads, int head_dim, int d_model, int true_rank, std::mt19937& rng) {
  MhaWeights w = random_mha(n_heads, head_dim, d_model, rng);
  const Eigen::MatrixXd basis = gaussian(d_model, true_rank, rng, 1.0 / std::sqrt(double(d_model)));
  w.w_k = (basis * gaussian(true_rank, n_heads * head_dim, rng, 1.0 / std::sqrt(double(true_rank))) +
           gaussian(d_model, n_heads * head_dim, rng, 0.01 / std::sqrt(double(d_model))))
              .cast<float>();
  w.w_v = (basis * gaussian(true_rank, n_heads * head_dim, rng, 1.0 / std::sqrt(double(true_rank))) +
           gaussian(d_model, n_heads * head_dim, rng, 0.01 / std::sqrt(double(d_model))))
              .cast<float>();
  return w;
}

}  // namespace

TEST_CASE("kept pairs: uniform spacing, 2-norm ranking, permutations inside each head") {
  std::mt19937 rng(1);
  MhaWeights w = random_mha(4, 16, 64, rng);
  const auto uniform = select_kept_pairs(w, kShape, 2, KeepSelection::uniform);
  for (const auto& head : uniform) CHECK(head == std::vector<int>{0, 4});  // floor(k * 8 / 2)
  CHECK(select_kept_pairs(w, kShape, 3, KeepSelection::uniform)[0] == std::vector<int>{0, 2, 5});

  // Make pair 6 of head 1 and pair 2 of head 3 dominate both query and key norms.
  for (int c : {1 * 16 + 12, 1 * 16 + 13, 3 * 16 + 4, 3 * 16 + 5}) {
    w.w_q.col(c) *= 20;
    w.w_k.col(c) *= 20;
  }
  const Eigen::MatrixXd x = gaussian(50, 64, rng);
  const auto by_norm = select_kept_pairs(w, kShape, 1, KeepSelection::two_norm, x);
  CHECK(by_norm[1] == std::vector<int>{6});
  CHECK(by_norm[3] == std::vector<int>{2});

  const auto conv = WhisperMlaDecomposition(w, kShape, by_norm).truncate(10);
  for (int c = 0; c < 64; ++c) {
    const int head = c / 16;
    CHECK(conv.permutation[std::size_t(c)] / 16 == head);  // never across heads
  }
  // Head 1's last two columns are its kept pair, dims 12 and 13.
  CHECK(conv.permutation[1 * 16 + 14] == 1 * 16 + 12);
  CHECK(conv.permutation[1 * 16 + 15] == 1 * 16 + 13);
}

TEST_CASE("at full rank the conversion reproduces MHA to rounding, for both selections and Sigma splits") {
  std::mt19937 rng(2);
  const MhaWeights w = random_mha(4, 16, 64, rng);
  const Eigen::MatrixXd x = gaussian(40, 64, rng);
  for (KeepSelection sel : {KeepSelection::uniform, KeepSelection::two_norm})
    for (SigmaSplit split : {SigmaSplit::symmetric, SigmaSplit::into_up}) {
      const WhisperMlaDecomposition dec(w, kShape, select_kept_pairs(w, kShape, 2, sel, x));
      CHECK(dec.max_rank() == 64);
      const WhisperMlaWeights c = dec.truncate(dec.max_rank(), split);
      const ConversionReport e = measure_conversion(w, kShape, c, x);
      INFO("selection ", int(sel), " split ", int(split));
      CHECK(e.key <= 1e-12);
      CHECK(e.value <= 1e-12);
      CHECK(e.output <= 1e-12);
      CHECK(dec.weight_error(64) == 0.0);
    }
}

TEST_CASE_TEMPLATE("the converted Mla layer through Attention equals MHA (full rank, fp32)", L, Nhd, Hnd, Paged<8>) {
  using V = Mla<64, 4, MlaKeyPart::preserved>;
  std::mt19937 rng(3);
  const MhaWeights w = random_mha(4, 16, 64, rng);
  const Eigen::MatrixXd x = gaussian(30, 64, rng);
  const WhisperMlaWeights c = convert_whisper_mla(w, kShape, {.kept_pairs = 2, .latent_rank = 64});
  const AttentionShape shape{4, 16, 64};
  const Eigen::MatrixXd q = (x * dbl(w.w_q)).rowwise() + dbl(w.b_q), k = x * dbl(w.w_k), v = (x * dbl(w.w_v)).rowwise() + dbl(w.b_v);
  const Eigen::MatrixXd mha = convert::detail::causal_attention(q, k, v, 4);
  const double tol = 1e-5 * mha.cwiseAbs().maxCoeff();  // fp32 rounding of O(1) sums of 64 terms

  for (bool cpu : {false, true}) {
    RowMatrixXf out(30, V::output_width(shape));
    const RowMatrixXf queries = c.queries(x), latent = c.latent(x), kept = c.key_part(x);
    auto run = [&]<class E>(std::type_identity<E>) {
      Attention<V, L, E> attn(shape, {.max_sequences = 1, .capacity = 30, .poison_unused = true}, c.mla_params<V>(), 2);
      const int seq = attn.open_sequence();
      attn.prefill(seq, queries.topRows(20), {latent.topRows(20), kept.topRows(20)}, Mask::causal, out.topRows(20));
      const int one[] = {seq};
      for (int t = 20; t < 30; ++t) attn.decode(one, queries.row(t), {latent.row(t), kept.row(t)}, out.row(t));
    };
    if (cpu)
      run(std::type_identity<exec::CpuSimd>{});
    else
      run(std::type_identity<exec::Reference>{});
    INFO("executor ", (cpu ? "cpu" : "reference"));
    CHECK(max_abs_diff(out, RowMatrixXd(mha)) <= tol);
  }
}

TEST_CASE("below full rank the error falls as the rank grows (random and structured weights)") {
  std::mt19937 rng(4);
  const Eigen::MatrixXd x = gaussian(48, 64, rng);
  for (bool structured : {false, true}) {
    const MhaWeights w = structured ? structured_mha(4, 16, 64, 6, rng) : random_mha(4, 16, 64, rng);
    const WhisperMlaDecomposition dec(w, kShape, select_kept_pairs(w, kShape, 2, KeepSelection::uniform));
    ConversionReport prev{0, 2, 2, 2, 2};
    double prev_weight = 2;
    std::string table = structured ? "structured (rank 6 + 1% noise)\n" : "random\n";
    for (int r : {1, 2, 4, 6, 8, 12, 16, 24, 32, 40, 48, 56, 64}) {
      const ConversionReport e = measure_conversion(w, kShape, dec.truncate(r), x);
      const double we = dec.weight_error(r);
      table += "  rank " + std::to_string(r) + ": weight " + std::to_string(we) + "  K " + std::to_string(e.key) + "  V " +
               std::to_string(e.value) + "  KV " + std::to_string(e.kv) + "  out " + std::to_string(e.output) + "\n";
      INFO("rank ", r);
      // Guaranteed by the SVD: the truncated singular values and their image under x only shrink.
      CHECK(we <= prev_weight);
      CHECK(e.kv <= prev.kv + 1e-15);
      // Not guaranteed term by term, but what a useful conversion shows; checked on these inputs.
      CHECK(e.key <= prev.key + 1e-15);
      CHECK(e.value <= prev.value + 1e-15);
      CHECK(e.output <= prev.output + 1e-12);
      prev = e;
      prev_weight = we;
    }
    MESSAGE(table);
    CHECK(prev.output <= 1e-12);
    if (structured) {  // the shared 6-dim subspace: rank 6 leaves only the noise
      const ConversionReport at6 = measure_conversion(w, kShape, dec.truncate(6), x);
      CHECK(at6.kv < 0.05);
    }
  }
}

TEST_CASE("bad conversion inputs are clear errors") {
  std::mt19937 rng(5);
  MhaWeights w = random_mha(4, 16, 64, rng);
  const Eigen::MatrixXd x = gaussian(10, 64, rng);
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, kShape, {.kept_pairs = 2, .latent_rank = 65}); },
                                "latent rank 65 is out of range [1, 64]");
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, kShape, {.kept_pairs = 2, .latent_rank = 0}); }, "latent rank 0 is out of range");
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, kShape, {.kept_pairs = 9, .latent_rank = 8}); },
                                "kept_pairs = 9 is out of range [0, head_dim / 2 = 8]");
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, kShape, {.selection = KeepSelection::two_norm}); }, "calibration inputs are empty");
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, kShape, {.selection = KeepSelection::two_norm}, gaussian(10, 63, rng)); },
                                "calibration inputs have 63 columns, expected d_model = 64");
  check_throws_with<ShapeError>([&] { WhisperMlaDecomposition(w, kShape, {{0}, {1}, {2}}); }, "3 kept-pair lists for 4 heads");
  check_throws_with<ShapeError>([&] { WhisperMlaDecomposition(w, kShape, {{0}, {1}, {2}, {8}}); }, "head 3 keeps pair 8, out of range [0, 8)");
  check_throws_with<ShapeError>([&] { WhisperMlaDecomposition(w, kShape, {{0}, {1}, {2}, {1, 2}}); }, "must keep the same number of pairs");
  check_throws_with<ShapeError>([&] { WhisperMlaDecomposition(w, kShape, {{0}, {1}, {2}, {3, 3}}); }, "keeps a pair twice");

  const WhisperMlaWeights c = convert_whisper_mla(w, kShape, {.kept_pairs = 2, .latent_rank = 16});
  check_throws_with<ShapeError>([&] { (void)c.mla_params<Mla<32, 4, MlaKeyPart::preserved>>(); },
                                "weights have latent rank 16 and 4 kept dims per head, but the policy is mla_r32_keep4");

  MhaWeights bad = w;
  bad.w_k = gaussian_f(64, 60, rng);
  check_throws_with<ShapeError>([&] { convert_whisper_mla(bad, kShape, {}); }, "W_k is 64 x 60, expected 64 x 64");
  check_throws_with<ShapeError>([&] { convert_whisper_mla(w, {4, 15, 64}, {}); }, "even head_dim");
  bad = w;
  bad.b_v = Eigen::RowVectorXf::Zero(3);
  check_throws_with<ShapeError>([&] { convert_whisper_mla(bad, kShape, {}); }, "b_v has 3 entries, expected 64 (or none)");
  bad = w;
  bad.w_o.resize(0, 0);  // one weights type for every converter: a whole MHA layer, W_o included
  check_throws_with<ShapeError>([&] { convert_whisper_mla(bad, kShape, {}); }, "W_o is 0 x 0, expected 64 x 64");
  // The key bias is dropped (it cancels in the softmax): the output error stays at rounding.
  bad = w;
  bad.b_k = gaussian_f(1, 64, rng, 0.5);
  const ConversionReport with_key_bias =
      measure_conversion(bad, kShape, convert_whisper_mla(bad, kShape, {.kept_pairs = 2, .latent_rank = 64}), x);
  CHECK(with_key_bias.output <= 1e-12);
}

TEST_CASE("bad Mla / Mtla parameters and rows are clear errors") {
  using V = Mla<8, 2, MlaKeyPart::preserved>;
  const AttentionShape s{2, 4};
  check_throws_with<ShapeError>([&] { Attention<V, Nhd, exec::Reference>(s, {}); }, "w_uk is (0, 0), expected (Rank, n_heads * 2) = (8, 4)");
  V::Params p;
  p.w_uk = RowMatrixXf::Zero(8, 4);
  p.w_uv = RowMatrixXf::Zero(8, 7);
  check_throws_with<ShapeError>([&] { Attention<V, Nhd, exec::Reference>(s, {}, p); }, "w_uv is (8, 7), expected (Rank, n_heads * head_dim) = (8, 8)");
  p.w_uv = RowMatrixXf::Zero(8, 8);
  p.value_bias = Eigen::RowVectorXf::Zero(5);
  check_throws_with<ShapeError>([&] { Attention<V, Nhd, exec::Reference>(s, {}, p); }, "value_bias has 5 entries, expected 0 or");
  p.value_bias.resize(0);
  check_throws_with<ShapeError>([&] { Attention<Mla<8, 6, MlaKeyPart::preserved>, Nhd, exec::Reference>(s, {}); },
                                "6 preserved key dims per head do not fit head_dim = 4");

  Attention<V, Nhd, exec::CpuSimd> attn(s, {.max_sequences = 1, .capacity = 4}, p, 1);
  const int seq = attn.open_sequence();
  RowMatrixXf q = RowMatrixXf::Zero(2, 8), lat = RowMatrixXf::Zero(2, 8), part = RowMatrixXf::Zero(2, 4), out(2, 8);
  RowMatrixXf lat_bad = RowMatrixXf::Zero(2, 7), part_bad = RowMatrixXf::Zero(1, 4);
  check_throws_with<ShapeError>([&] { attn.prefill(seq, q, {lat_bad, part}, Mask::causal, out); }, "latent has 7 columns, expected Rank = 8");
  check_throws_with<ShapeError>([&] { attn.prefill(seq, q, {lat, part_bad}, Mask::causal, out); }, "latent has 2 rows but key_part has 1");
  CHECK(attn.length(seq) == 0);

  using M = Mtla<8, 2, 2>;
  M::Params mp;
  mp.w_uk = RowMatrixXf::Zero(8, 8);
  mp.w_uv = RowMatrixXf::Zero(8, 8);
  mp.ln_gamma = Eigen::RowVectorXf::Ones(8);
  mp.ln_beta = Eigen::RowVectorXf::Zero(7);
  check_throws_with<ShapeError>([&] { Attention<M, Nhd, exec::Reference>(s, {}, mp); }, "ln_beta has 7 entries, expected 8");
  mp.ln_beta = Eigen::RowVectorXf::Zero(8);
  mp.pos_weight = RowMatrixXf::Zero(8, 3);
  check_throws_with<ShapeError>([&] { Attention<M, Nhd, exec::Reference>(s, {}, mp); }, "pos_weight is (8, 3), expected (Rank, Rank / 4) = (8, 2)");
  mp.pos_weight = RowMatrixXf::Zero(8, 2);
  mp.pos_bias = mp.latent_bias = Eigen::RowVectorXf::Zero(2);
  mp.latent_weight = RowMatrixXf::Zero(8, 2);
  // Capacity counts cache rows: 2 rows hold 4 tokens at stride 2; a fifth overflows and changes nothing.
  Attention<M, Paged<1>, exec::CpuSimd> mt(s, {.max_sequences = 1, .capacity = 2}, mp, 1);
  const int m = mt.open_sequence();
  RowMatrixXf mq = RowMatrixXf::Zero(5, M::query_width(s)), ml = RowMatrixXf::Ones(5, 8), mk = RowMatrixXf::Zero(5, 2), mo(5, 8);
  mt.prefill(m, mq.topRows(3), {ml.topRows(3), mk.topRows(3)}, Mask::causal, mo.topRows(3));
  check_throws_with<CapacityError>([&] { mt.prefill(m, mq.topRows(2), {ml.topRows(2), mk.topRows(2)}, Mask::causal, mo.topRows(2)); },
                                   "holds 3 tokens in 2 of 2 cache rows (2 tokens per row); appending 2 tokens would overflow");
  CHECK(mt.length(m) == 3);
  mt.prefill(m, mq.topRows(1), {ml.topRows(1), mk.topRows(1)}, Mask::causal, mo.topRows(1));
  CHECK(mt.length(m) == 4);
  CHECK(mt.cache_rows(m) == 2);
  check_throws_with<ShapeError>([&] { mt.append(m, {ml.leftCols(7), mk}); }, "latent has 7 columns, expected Rank = 8");
}
