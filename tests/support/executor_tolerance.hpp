// How far two executors may differ on a converted layer's output (support/mha_layer.hpp's
// run_script), derived from the fp32 error of the attend step and the maps after it, with the
// magnitudes measured on the script's own inputs. Used where an fp32 executor (exec::Cuda) is
// compared with exec::Reference on the same weights and cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <polyattn/core/matrix.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/mha_layer.hpp"
#include "support/rounded_cache.hpp"

namespace polyattn::testing {

/// Largest 2-norm of a `width`-column slice of a row of `m` (one head's query or key).
inline double max_slice_norm(const RowMatrixXf& m, int width) {
  double best = 0;
  for (Eigen::Index c = 0; c + width <= m.cols(); c += width) best = std::max(best, double(m.middleCols(c, width).rowwise().norm().maxCoeff()));
  return best;
}

/// The largest column 2-norm of m: an error vector e (2-norm |e|) moves an entry of e m by at most
/// |e| times it (Cauchy-Schwarz).
inline double max_column_norm(const RowMatrixXf& m) { return double(m.colwise().norm().maxCoeff()); }

/// How much rounding to T can grow the 2-norm of a row of `width` elements: by (1 + u) for a
/// 16-bit T; for int8 each element moves by at most half its segment's step, max|x| / 254 <=
/// |x|_2 / 254, so the row by sqrt(width) / 254 of its norm (plus the decode's 2^-24).
template <class T>
double norm_growth(int width) {
  if constexpr (std::is_same_v<T, std::int8_t>)
    return 1 + std::sqrt(double(width)) / 254 + 0x1p-24;
  else
    return 1 + unit_roundoff<T>();
}

/// Bound on |y_a - y_b| per entry when two executors run `s` through variant V (XCache, or SlimK
/// of either option, with or without RoPE) on model `m`, one of them in fp32 (the other,
/// Reference, is exact up to its final rounding), over at most `tokens` cached tokens per sequence.
///  - Scores: a dk-term fp32 dot product summed with at most dk/8 + 16 terms per partial sum
///    (CpuSimd's lanes; CUDA's warp lanes hold dk/32, plus 5 butterfly steps and the folded scale)
///    errs by ds <= (dk/8 + 16) eps scale |q_h| |k|, the 2-norms of one head's query and key.
///  - Attended row a_h (width w), a convex combination of value rows: weights moved by sum <= 2 ds,
///    and the value sum of `tokens` terms (numerator and normaliser): |da_h| <= (2 ds + 2 eps
///    (tokens + 8)) max_t |v_t| in 2-norm.
///  - finish_outputs maps a_h through M_h (W_kv,h for slim, W_v,h for the X-cache), run_script
///    through W_o: the heads' error is at most sqrt(n_heads) |da_h| max_h sigma_max(M_h) in
///    2-norm, an entry of y at most that times W_o's largest column norm. For slim sigma_max(W_kv)
///    grows with cond(W_k) (W_kv = W_k^-1 W_v): that is where cond(W_k) enters.
///  - Both sides round the two products (w-term and e-term dot products) once each.
///  - SlimK option 1 derives the values v_h = k W_kv,h (width dk) in the variant, the same fp32
///    rows for both executors, and attends them as MHA does: no map after the attend. Their
///    2-norm is bounded from the exact product: an e-term fp32 dot product errs by at most e eps
///    |k| |W_kv column| (Cauchy-Schwarz), so a head's slice by e eps |k| |W_kv,h|_F.
///  - RoPE (slim::Rope) rotates queries and keys, each pair of elements by fp32 cos and sin
///    rounded once: the 2-norms grow by at most 5 sqrt(2) eps (two products and a sum, and the
///    rounding of cos and sin), covered by (1 + 8 eps).
/// `query_roundoff` u_q: one executor rounds the (scaled) query before its dot products so that
/// |q~_h - q_h| <= u_q |q_h| in 2-norm (exec::CpuSimdBf16Scores, each element to a relative 2^-8:
/// 2^-8; exec::CpuSimdInt8Scores, each to half a step of max|q_h| / 127: sqrt(dk) / 254 (1 +
/// 2^-14)), which moves a score by at most u_q scale |q_h| |k| more (Cauchy-Schwarz); the weights
/// then move by a relative exp(2 ds) - 1 at most, which the first-order 2 ds bounds only for
/// small ds.
template <class V>
double executor_tolerance(const LayerModel& m, const Script& s, int tokens, double query_roundoff = 0) {
  const AttentionShape shape = m.shape;
  const int d = shape.input_width(), e = shape.query_width();
  RowMatrixXf x(s.prefill_a.rows() + s.prefill_b.rows() + Eigen::Index(s.steps.size()) * 2, d);
  Eigen::Index r = 0;
  for (const RowMatrixXf* part : {&s.prefill_a, &s.prefill_b}) {
    x.middleRows(r, part->rows()) = *part;
    r += part->rows();
  }
  for (const RowMatrixXf& step : s.steps) {
    x.middleRows(r, step.rows()) = step;
    r += step.rows();
  }
  const double eps = 0x1p-24, scale = 1.0 / std::sqrt(double(shape.head_dim));
  int dk = 0, w = 0;
  // SlimK option 1 sets map_norm to 1 and leaves map_column 0: no map follows its attend (its
  // values were mapped before it).
  double q_norm = 0, k_norm = 0, v_norm = 0, map_norm = 0, map_column = 0, bias = 0;
  if constexpr (std::is_same_v<V, XCache>) {
    RowMatrixXf q;
    XCache::prepare_queries(shape, m.xcache, x, q);
    dk = w = d;
    q_norm = max_slice_norm(q, d);
    k_norm = v_norm = max_slice_norm(x, d);  // the cache holds x, for keys and values
    for (int h = 0; h < shape.n_heads; ++h) map_norm = std::max(map_norm, spectral_norm(m.xcache.w_v.middleCols(h * shape.head_dim, shape.head_dim)));
    map_column = max_column_norm(m.xcache.w_v);
    bias = m.xcache.b_v.size() ? double(m.xcache.b_v.norm()) : 0.0;
  } else {
    static_assert(requires { V::option; V::rotary; }, "executor_tolerance: XCache or a SlimK");
    RowMatrixXf q = x * m.mha.w_q;
    if (m.mha.b_q.size()) q.rowwise() += m.mha.b_q;
    const RowMatrixXf k = x * m.mha.w_k;
    const double rotation = V::rotary ? 1 + 8 * eps : 1.0;  // RoPE's growth of the 2-norms (above)
    dk = shape.head_dim;
    q_norm = max_slice_norm(q, dk) * rotation;
    k_norm = max_slice_norm(k, dk) * rotation;  // head h's slice of the key row
    if constexpr (V::option == 2) {
      w = e;
      v_norm = max_slice_norm(k, e);  // K-only: the values are whole key rows (unrotated)
      for (int h = 0; h < shape.n_heads; ++h) map_norm = std::max(map_norm, spectral_norm(m.slim.w_kv.middleCols(h * shape.head_dim, shape.head_dim)));
      map_column = max_column_norm(m.slim.w_kv);
    } else {
      w = dk;
      const Eigen::MatrixXd exact = k.cast<double>() * m.slim.w_kv.cast<double>();  // v = k W_kv, unrounded
      double block_norm = 0;  // the largest Frobenius norm of a head's block W_kv,h
      for (int h = 0; h < shape.n_heads; ++h) {
        v_norm = std::max(v_norm, exact.middleCols(h * dk, dk).rowwise().norm().maxCoeff());
        block_norm = std::max(block_norm, double(m.slim.w_kv.middleCols(h * dk, dk).norm()));
      }
      v_norm += e * eps * double(k.rowwise().norm().maxCoeff()) * block_norm;  // the fp32 rows the executors read (above)
      map_norm = 1;
    }
  }
  const double ds = (dk / 8.0 + 16 + query_roundoff / eps) * eps * scale * q_norm * k_norm;
  const double weights = query_roundoff > 0 ? std::expm1(2 * ds) : 2 * ds;
  const double attended = (weights + 2 * eps * (tokens + 8)) * v_norm;
  const double heads_norm = std::sqrt(double(shape.n_heads)) * v_norm * map_norm + bias;
  // 2-norm of the heads' error: the attend error through M, and each side's rounding of a_h M_h
  // (an entry errs by w eps |a_h| |M column|, e entries).
  const double heads_error = std::sqrt(double(shape.n_heads)) * attended * map_norm + 2 * std::sqrt(double(e)) * w * eps * v_norm * map_column;
  const double out_column = max_column_norm(m.mha.w_o);
  return heads_error * out_column + 2 * e * eps * heads_norm * out_column;
}

}  // namespace polyattn::testing
