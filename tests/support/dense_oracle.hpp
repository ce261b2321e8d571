// Test support: attention computed densely, in double, from full (tokens, heads * dim) matrices,
// with no cache and no polyattn code, so it checks the Reference executor itself.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include <polyattn/core/matrix.hpp>

namespace polyattn::testing {

/// Which of the keys its prefix leaves it a row sees, for the oracle (the key masks of
/// core/key_mask.hpp, written independently): the last `window` of them (0: all), less those
/// `keeps(visible, key)` refuses (empty: none).
struct OracleKeys {
  int window = 0;
  std::function<bool(int visible, int key)> keeps;
};

/// out (n_q, n_heads * dv): query i (absolute position first_pos + i) attends keys [0, visible(i))
/// where visible = causal ? first_pos + i + 1 : keys.rows(), narrowed by `which`. Query head h
/// reads KV head h / group. Compiled once, optimised in every build (support/dense_oracle.cpp).
RowMatrixXf dense_attention(const RowMatrixXf& q, const RowMatrixXf& k, const RowMatrixXf& v, int n_heads, int group,
                            bool causal, int first_pos, const OracleKeys& which = {});

/// Uniform(-range, range) entries from a seeded generator (tests are reproducible). Compiled
/// once, optimised, with the oracle: at -O0 each draw cost two long-double logarithms.
RowMatrixXf random_matrix(int rows, int cols, std::mt19937& rng, float range = 1.0f);

/// Largest |a - b|; NaN anywhere makes it NaN (so a comparison with a tolerance fails).
inline double max_abs_diff(const RowMatrixXf& a, const RowMatrixXf& b) {
  double worst = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a.data()[i]) - double(b.data()[i]));
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

/// Error bound for fp32 attention against a double oracle, entries of q, k, v in [-1, 1].
/// Scores: a dk-term fp32 dot product errs by at most (dk + 16) * eps * sum|q_i k_i| * scale <=
/// (dk + 16) * eps * sqrt(dk): CpuSimd's prefill blocks (exec/cpu/block_tile.hpp) add the dk terms
/// of a score one after another in one lane, which bounds the decode kernels too (at most dk/8
/// terms per lane, a log-depth lane reduction and a scalar tail of < 16 terms). A score error ds moves
/// each softmax weight by a relative 2 ds at most, hence the output (a convex combination of
/// values in [-1, 1]) by 2 ds. The value accumulation adds `tokens` fp32 terms in sequence:
/// relative error <= tokens * eps, for the numerator and the normaliser, plus a few roundings.
inline double fp32_attention_tolerance(int dk, int tokens) {
  const double eps = 0x1p-24;  // unit roundoff of fp32
  const double ds = (dk + 16.0) * eps * std::sqrt(double(dk));
  return 2 * ds + 2 * eps * (tokens + 8);
}

}  // namespace polyattn::testing
