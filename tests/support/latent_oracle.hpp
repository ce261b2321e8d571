// Test support for the latent variants (Mla, Mtla): random weights with bounded magnitudes, the
// non-absorbed computation in double (keys and values expanded per head, then plain softmax
// attention) and MTLA's parallel form as the paper writes it, written without polyattn's variant
// code so they check it.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <polyattn/core/matrix.hpp>

#include "support/dense_oracle.hpp"

namespace polyattn::testing {

using RowMatrixXd = RowMatrix<double>;

/// out (n_q, n_heads * dv) in double: query i attends key rows [0, visible[i]) (all when empty);
/// q, k (tokens, n_heads * dk), v (tokens, n_heads * dv), scale given.
inline RowMatrixXd dense_attention_f64(const RowMatrixXd& q, const RowMatrixXd& k, const RowMatrixXd& v, int n_heads, double scale,
                                       const std::vector<int>& visible = {}) {
  const int dk = int(q.cols()) / n_heads, dv = int(v.cols()) / n_heads;
  RowMatrixXd out(q.rows(), n_heads * dv);
  for (int i = 0; i < q.rows(); ++i) {
    const int n = visible.empty() ? int(k.rows()) : visible[std::size_t(i)];
    for (int h = 0; h < n_heads; ++h) {
      Eigen::VectorXd s = k.block(0, h * dk, n, dk) * q.row(i).segment(h * dk, dk).transpose() * scale;
      s = (s.array() - s.maxCoeff()).exp().matrix();
      out.row(i).segment(h * dv, dv) = (s.transpose() * v.block(0, h * dv, n, dv)) / s.sum();
    }
  }
  return out;
}

/// Largest |a - b| between a float and a double matrix; NaN anywhere gives NaN.
inline double max_abs_diff(const RowMatrixXf& a, const RowMatrixXd& b) {
  double worst = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a.data()[i]) - b.data()[i]);
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

/// (rows, cols) of Uniform(-1/fan_in, 1/fan_in): a fan_in-term product with inputs in [-1, 1]
/// stays in [-1, 1] (a bound the tolerances use).
inline RowMatrixXf bounded_weight(int rows, int cols, int fan_in, std::mt19937& rng) {
  return random_matrix(rows, cols, rng, 1.0f / float(std::max(1, fan_in)));
}

/// Per head h: [latent W_uk,h | key part of h] in double; `per_head_part` for the preserved form.
inline RowMatrixXd expand_keys(const RowMatrixXf& latent, const RowMatrixXf& key_part, const RowMatrixXf& w_uk, int n_heads, int part_dim,
                               bool per_head_part) {
  const int nope = int(w_uk.cols()) / n_heads, qd = nope + part_dim;
  const RowMatrixXd lat = latent.cast<double>(), uk = w_uk.cast<double>();
  RowMatrixXd k(latent.rows(), n_heads * qd);
  for (int h = 0; h < n_heads; ++h) {
    k.middleCols(h * qd, nope) = lat * uk.middleCols(h * nope, nope);
    k.middleCols(h * qd + nope, part_dim) = key_part.middleCols(per_head_part ? h * part_dim : 0, part_dim).cast<double>();
  }
  return k;
}

/// MTLA's parallel form as the paper writes it, in double, from V's weights alone (no variant
/// code): C' = (W o M) C with C = LayerNorm(latent), W = sigmoid(Lin_p(PE of each token's slot)
/// Lin_c(C)^T) (T x T) and M the chunk mask (same slot, n <= m); then per head, scores
/// q_m W_uk,h C'_n^T + q^R_m k^R_n^T under the stride-aware causal mask (key n seen from query
/// m iff n == m, or n < m and (n + 1) % Stride == 0) and output (softmax C') W_uv,h.
/// q (T, n_heads * (head_dim + RopeDim)), latent (T, Rank), rope_key (T, RopeDim) -> (T, n_heads * head_dim).
/// `merged_max`, when given, receives max |C'|: the largest latent entry of any key.
template <class V>
RowMatrixXd mtla_parallel_oracle(int n_heads, int head_dim, const typename V::Params& p, const RowMatrixXf& q,
                                 const RowMatrixXf& latent, const RowMatrixXf& rope_key, double* merged_max = nullptr) {
  constexpr int R = V::rank, S = V::stride, P = V::rope_dim;
  const int T = int(latent.rows()), qd = head_dim + P;
  RowMatrixXd c(T, R), pe(T, R);
  for (int t = 0; t < T; ++t) {
    const Eigen::RowVectorXd x = latent.row(t).cast<double>();
    const double mean = x.mean(), var = (x.array() - mean).square().mean();
    c.row(t) = ((x.array() - mean) / std::sqrt(var + double(p.ln_eps)) * p.ln_gamma.template cast<double>().array() +
                p.ln_beta.template cast<double>().array())
                   .matrix();
    for (int k = 0; k < R / 2; ++k) {
      const double angle = double(t / S) / std::pow(10000.0, 2.0 * k / R);
      pe(t, 2 * k) = std::sin(angle);
      pe(t, 2 * k + 1) = std::cos(angle);
    }
  }
  const RowMatrixXd hp = (pe * p.pos_weight.template cast<double>()).rowwise() + p.pos_bias.template cast<double>();
  const RowMatrixXd hc = (c * p.latent_weight.template cast<double>()).rowwise() + p.latent_bias.template cast<double>();
  RowMatrixXd w = (hp * hc.transpose()).unaryExpr([](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  for (int m = 0; m < T; ++m)
    for (int n = 0; n < T; ++n)
      if (!(m / S == n / S && n <= m)) w(m, n) = 0;  // chunk mask
  const RowMatrixXd merged = w * c;
  if (merged_max) *merged_max = T > 0 ? merged.cwiseAbs().maxCoeff() : 0.0;
  const RowMatrixXd qs = q.cast<double>(), kr = rope_key.cast<double>();
  const RowMatrixXd uk = p.w_uk.template cast<double>(), uv = p.w_uv.template cast<double>();
  const double scale = p.scale > 0 ? double(p.scale) : 1.0 / std::sqrt(double(qd));
  RowMatrixXd out(T, n_heads * head_dim);
  for (int h = 0; h < n_heads; ++h) {
    const RowMatrixXd q_lat = qs.middleCols(h * qd, head_dim) * uk.middleCols(h * head_dim, head_dim).transpose();
    RowMatrixXd scores = (q_lat * merged.transpose() + qs.middleCols(h * qd + head_dim, P) * kr.transpose()) * scale;
    for (int m = 0; m < T; ++m) {
      for (int n = 0; n < T; ++n)
        if (!(n == m || (n < m && (n + 1) % S == 0))) scores(m, n) = -std::numeric_limits<double>::infinity();
      scores.row(m) = (scores.row(m).array() - scores.row(m).maxCoeff()).exp().matrix();
      scores.row(m) /= scores.row(m).sum();
    }
    out.middleCols(h * head_dim, head_dim) = (scores * merged) * uv.middleCols(h * head_dim, head_dim);
  }
  return out;
}

/// Error bound for the absorbed fp32 path against the double expansion, when q, the latent and the
/// key part lie in [-1, 1], W_uk entries in [-1/nope, 1/nope] and W_uv entries in [-1/rank, 1/rank]
/// (so q W_ukᵀ per head and a latent average times W_uv stay in [-1, 1]). Scores: the absorbed query costs `nope` fp32 terms each
/// (error <= nope eps), which reach the score through a `rank`-term dot with |c| <= 1, and the
/// score itself is a `key_dim`-term SIMD dot (see fp32_attention_tolerance); times `scale`. A score
/// error ds moves the softmax output by 2 ds; the latent average adds `tokens` roundings, and the
/// final W_uv product `rank` more. When the latent entries reach `magnitude` M >= 1 instead of 1
/// (MTLA's merged slots), a score error grows to M ds and moves an output of values up to M by
/// 2 M ds M, and the two roundings grow by M.
inline double absorbed_tolerance(int key_dim, int nope, int rank, int tokens, double scale, double magnitude = 1.0) {
  const double eps = 0x1p-24, m = magnitude;
  const double ds = scale * eps * ((key_dim / 8.0 + 16) * key_dim + double(rank) * nope);
  return 2 * ds * m * m + m * (2 * eps * (tokens + 8) + eps * (rank + 8));
}

}  // namespace polyattn::testing
