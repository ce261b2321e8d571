// Test support for the latent variants (Mla, Mtla): random weights with bounded magnitudes, and
// the non-absorbed computation in double (keys and values expanded per head, then plain softmax
// attention), written without polyattn's variant code so it checks it.
#pragma once

#include <algorithm>
#include <cmath>
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

/// Error bound for the absorbed fp32 path against the double expansion, when q, the latent and the
/// key part lie in [-1, 1], W_uk entries in [-1/nope, 1/nope] and W_uv entries in [-1/rank, 1/rank]
/// (so q W_ukᵀ per head and a latent average times W_uv stay in [-1, 1]). Scores: the absorbed query costs `nope` fp32 terms each
/// (error <= nope eps), which reach the score through a `rank`-term dot with |c| <= 1, and the
/// score itself is a `key_dim`-term SIMD dot (see fp32_attention_tolerance); times `scale`. A score
/// error ds moves the softmax output by 2 ds; the latent average adds `tokens` roundings, and the
/// final W_uv product `rank` more.
inline double absorbed_tolerance(int key_dim, int nope, int rank, int tokens, double scale) {
  const double eps = 0x1p-24;
  const double ds = scale * eps * ((key_dim / 8.0 + 16) * key_dim + double(rank) * nope);
  return 2 * ds + 2 * eps * (tokens + 8) + eps * (rank + 8);
}

}  // namespace polyattn::testing
