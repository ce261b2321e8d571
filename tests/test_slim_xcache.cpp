// Slim attention (K-only cache, options 1 and 2, with and without RoPE) and the X-cache against
// MHA, on random layers whose W_k has a known condition number: the layer outputs
// y = heads W_o + b_o must agree within a tolerance that grows with cond(W_k), as the seed
// predicts. Caches are NaN-poisoned beyond each sequence's end.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <type_traits>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/dense_oracle.hpp"
#include "support/mha_layer.hpp"
#include "support/zero_row_calls.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

constexpr double kEps = 0x1p-24;  // fp32 unit roundoff


/// First-order bound on |y_slim - y_mha| from computing V from K in fp32: the keys carry a
/// relative rounding error ~eps (x W_k in fp32) and W_kv one of eps per entry; both reach V
/// amplified by cond(W_k) (|dV| <= eps * cond * |x| |W_v| per row), and y = heads W_o.
/// The attention itself (double accumulation, identical scores up to the key bias) adds an fp32
/// term on |y|. The norm bound is per row (2-norm); `slack` = 2 counts the two rounding sources
/// (keys, W_kv), each ~eps in norm under the usual probabilistic rounding model.
double conversion_tolerance(const LayerModel& m, const Script& s, double max_abs_y) {
  double x_norm = 0;
  for (const RowMatrixXf* x : {&s.prefill_a, &s.prefill_b})
    x_norm = std::max(x_norm, double(x->rowwise().norm().maxCoeff()));
  for (const auto& x : s.steps) x_norm = std::max(x_norm, double(x.rowwise().norm().maxCoeff()));
  const double cond = m.slim.report.cond_k;
  const double slack = 2;
  return 64 * kEps * max_abs_y + slack * kEps * cond * x_norm * spectral_norm(m.mha.w_v) * spectral_norm(m.mha.w_o);
}

template <class V, class E = exec::Reference, class L = Nhd>
RowMatrixXf run_variant(const LayerModel& m, const Script& s) {
  Attention<V, L, E> attn(m.shape, script_cache(), params_for<V>(m), 2);
  return run_script(attn, m, s);
}

}  // namespace

TEST_CASE("SlimK options 1 and 2 match MHA, with an error that follows cond(W_k)") {
  const AttentionShape shape{6, 16};  // square W_k: d = e = 96
  double err_by_cond[3] = {};
  int i = 0;
  for (double cond : {1e1, 1e3, 1e5}) {
    std::mt19937 rng(42);
    const LayerModel m = random_layer_model(shape, cond, rng);
    const Script s = Script::random(96, rng);
    const RowMatrixXf y_mha = run_variant<Mha>(m, s);
    const RowMatrixXf y1 = run_variant<SlimK1>(m, s), y2 = run_variant<SlimK2>(m, s);
    const double tol = conversion_tolerance(m, s, y_mha.cwiseAbs().maxCoeff());
    const double e1 = max_abs_diff(y1, y_mha), e2 = max_abs_diff(y2, y_mha);
    MESSAGE(m.slim.report.summary(), " | max|y_slim1 - y_mha| = ", e1, ", max|y_slim2 - y_mha| = ", e2, ", tolerance ", tol,
            ", max|y| = ", y_mha.cwiseAbs().maxCoeff());
    CHECK(m.slim.report.cond_k == doctest::Approx(cond).epsilon(1e-3));  // W_k is rounded to float
    CHECK(e1 <= tol);
    CHECK(e2 <= tol);
    // option 1 equals option 2: the same sums in a different order
    CHECK(max_abs_diff(y1, y2) <= tol);
    err_by_cond[i++] = std::max(e1, e2);
  }
  // The cond-driven term dominates from 1e3 on: a 100x larger cond gives a clearly larger error.
  CHECK(err_by_cond[2] > 10 * err_by_cond[1]);
  CHECK(err_by_cond[2] > err_by_cond[0]);
}

TEST_CASE("SlimK with a non-square W_k (e > d) uses the right inverse and matches MHA") {
  const AttentionShape shape{4, 16, 48};  // d = 48, e = 64
  std::mt19937 rng(7);
  const LayerModel m = random_layer_model(shape, 100.0, rng);
  CHECK(m.slim.report.right_inverse);
  CHECK(m.slim.w_kv.rows() == 64);
  const Script s = Script::random(48, rng);
  const RowMatrixXf y_mha = run_variant<Mha>(m, s);
  const double tol = conversion_tolerance(m, s, y_mha.cwiseAbs().maxCoeff());
  MESSAGE(m.slim.report.summary());
  CHECK(max_abs_diff(run_variant<SlimK1>(m, s), y_mha) <= tol);
  CHECK(max_abs_diff(run_variant<SlimK2>(m, s), y_mha) <= tol);
}

TEST_CASE("SlimK with RoPE: raw keys cached, rotated after reading, equals MHA with rotated keys") {
  const AttentionShape shape{4, 16};  // a RoPE model shape: d = e = 64, no key bias
  std::mt19937 rng(11);
  const LayerModel m = random_layer_model(shape, 30.0, rng, /*rope=*/true);
  const Script s = Script::random(64, rng, 4, /*rope_base=*/10000.0);
  const RowMatrixXf y_mha = run_variant<Mha>(m, s);
  const double tol = conversion_tolerance(m, s, y_mha.cwiseAbs().maxCoeff());
  const double e1 = max_abs_diff(run_variant<SlimK<slim::ValuesFromKeys, slim::Rope>>(m, s), y_mha);
  const double e2 = max_abs_diff(run_variant<SlimK<slim::WeightedKeys, slim::Rope>>(m, s), y_mha);
  MESSAGE("RoPE: max error option 1 ", e1, ", option 2 ", e2, ", tolerance ", tol);
  CHECK(e1 <= tol);
  CHECK(e2 <= tol);
  // Without rotating the cached keys the result is wrong: the test can tell.
  CHECK(max_abs_diff(run_variant<SlimK2>(m, s), y_mha) > 100 * tol);
}

TEST_CASE("RoPE round trip: decoding undoes encoding, and scores depend on relative position only") {
  std::mt19937 rng(3);
  const RowMatrixXf x = random_matrix(5, 32, rng);
  RowMatrixXf y = x;
  apply_rope(y, 1000, 16, 10000.0);
  CHECK(max_abs_diff(y, x) > 0.1);
  apply_rope(y, 1000, 16, 10000.0, RopeDirection::decode);
  CHECK(max_abs_diff(y, x) <= 8 * kEps);
  // <rope(q, m), rope(k, n)> = <rope(q, m + s), rope(k, n + s)>
  RowMatrixXf q = random_matrix(1, 16, rng), k = random_matrix(1, 16, rng);
  RowMatrixXf q1 = q, k1 = k, q2 = q, k2 = k;
  apply_rope(q1, 9, 16, 10000.0);
  apply_rope(k1, 4, 16, 10000.0);
  apply_rope(q2, 109, 16, 10000.0);
  apply_rope(k2, 104, 16, 10000.0);
  CHECK(std::abs(q1.row(0).dot(k1.row(0)) - q2.row(0).dot(k2.row(0))) <= 64 * kEps);
}

TEST_CASE("XCache matches MHA on both query paths, for square and non-square W_k") {
  for (AttentionShape shape : {AttentionShape{6, 16}, AttentionShape{4, 16, 24}, AttentionShape{2, 32, 96}}) {
    std::mt19937 rng(5);
    const LayerModel base = random_layer_model(shape, 1e3, rng);
    const Script s = Script::random(shape.input_width(), rng);
    const RowMatrixXf y_mha = run_variant<Mha>(base, s);
    for (auto path : {XCache::QueryPath::projected, XCache::QueryPath::fused}) {
      LayerModel m = base;
      m.xcache = make_x_cache_params(m.mha, shape, path);
      const RowMatrixXf y = run_variant<XCache>(m, s);
      // Re-association only (q W_k^T X^T instead of q (X W_k)^T): no inverse, no cond(W_k).
      const double tol = 256 * kEps * std::sqrt(double(shape.input_width())) * y_mha.cwiseAbs().maxCoeff();
      INFO("d ", shape.input_width(), " e ", shape.query_width(), " path ", int(path));
      CHECK(max_abs_diff(y, y_mha) <= tol);
    }
  }
  // The precomputed W_q W_k^T is cheaper only for few, wide heads (d < 2 head_dim).
  CHECK(cheaper_x_cache_query_path({6, 64, 384}) == XCache::QueryPath::projected);  // Whisper tiny
  CHECK(cheaper_x_cache_query_path({2, 64, 96}) == XCache::QueryPath::fused);
}

TEST_CASE("cache sizes per token: slim is half of MHA, the X-cache is d") {
  const AttentionShape tiny{6, 64, 384};
  CHECK(SlimK2::cache_elements_per_token(tiny) * 2 == Mha::cache_elements_per_token(tiny));
  CHECK(SlimK1::cache_elements_per_token(tiny) == 384);
  static_assert(Attention<SlimK2, Nhd, exec::CpuSimd>::cache_bytes_per_token({6, 64, 384}) == 384 * 4);
  static_assert(Attention<XCache, Nhd, exec::CpuSimd>::cache_bytes_per_token({16, 128, 1024}) == 1024 * 4);  // T5-11B-like: 32x
  CHECK(XCache::cache_elements_per_token({128, 128, 1024}) * 32 == Mha::cache_elements_per_token({128, 128, 1024}));
}

TEST_CASE("SlimK and XCache: calls with zero rows change nothing, on every host executor") {
  std::mt19937 rng(11);
  const LayerModel m = random_layer_model({6, 16}, 1e2, rng);
  const auto check = [&]<class V, class E>() {
    Attention<V, Hnd, E> attn(m.shape, script_cache(), params_for<V>(m), 2);
    const int row_width = std::is_same_v<V, XCache> ? m.shape.input_width() : m.shape.query_width();
    const RowMatrixXf q = random_matrix(3, V::query_width(m.shape), rng), r = random_matrix(3, row_width, rng);
    const RowMatrixXf no_q(0, q.cols()), no_r(0, row_width);
    INFO(attn.name());
    check_zero_row_calls(attn, q, typename V::Rows{r}, no_q, typename V::Rows{no_r});
  };
  check.operator()<SlimK1, exec::Reference>();
  check.operator()<SlimK1, exec::CpuSimd>();
  check.operator()<SlimK2, exec::Reference>();
  check.operator()<SlimK2, exec::CpuSimd>();
  check.operator()<XCache, exec::Reference>();
  check.operator()<XCache, exec::CpuSimd>();
}
