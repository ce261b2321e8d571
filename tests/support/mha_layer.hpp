// Test support for converted variants: random MHA layers with a chosen cond(W_k), and one script
// (prefill two sequences, then batched decode) run through any variant, whose stacked layer
// outputs y = heads W_o + b_o are compared between variants.
#pragma once

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/convert/mha_weights.hpp>
#include <polyattn/convert/slim_k.hpp>
#include <polyattn/convert/x_cache.hpp>
#include <polyattn/core/rope.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/dense_oracle.hpp"

// The decompositions behind these helpers and behind convert_to_slim_k (Eigen's LU, QR and SVD
// in double) were most of every test translation unit's compile time: they are compiled once,
// in support/decompositions.cpp, and every test links that object.
extern template polyattn::SlimKWeights polyattn::convert_to_slim_k<float>(const polyattn::MhaWeights&,
                                                                         const polyattn::SlimKOptions&);
extern template polyattn::SlimKWeights polyattn::convert_to_slim_k<double>(const polyattn::MhaWeights&,
                                                                          const polyattn::SlimKOptions&);
extern template polyattn::SlimKWeights polyattn::convert_to_slim_k<Eigen::half>(const polyattn::MhaWeights&,
                                                                               const polyattn::SlimKOptions&);

namespace polyattn::testing {

/// A random n x n orthogonal matrix (Q of a Gaussian matrix's QR).
Eigen::MatrixXd random_orthogonal(int n, std::mt19937& rng);

/// (rows, cols) with min(rows, cols) singular values log-spaced from `largest` down to
/// largest / cond: U diag(sigma) V^T, U and V random orthogonal. cond = inf gives a zero one.
RowMatrixXf matrix_with_condition(int rows, int cols, double cond, double largest, std::mt19937& rng);

/// A random MHA layer of input width d and e = n_heads * head_dim, entries ~ 1/sqrt(d), with
/// cond(W_k) = cond_k (sigma_max(W_k) = 1).
inline MhaWeights random_mha_weights(int d, int e, double cond_k, std::mt19937& rng, bool biases = true) {
  const float r = float(1.0 / std::sqrt(double(d)));
  MhaWeights w;
  w.w_q = random_matrix(d, e, rng, r);
  w.w_k = matrix_with_condition(d, e, cond_k, 1.0, rng);
  w.w_v = random_matrix(d, e, rng, r);
  w.w_o = random_matrix(e, d, rng, float(1.0 / std::sqrt(double(e))));
  if (biases) {
    w.b_q = random_matrix(1, e, rng, 0.5f);
    w.b_k = random_matrix(1, e, rng, 0.5f);
    w.b_v = random_matrix(1, e, rng, 0.5f);
    w.b_o = random_matrix(1, d, rng, 0.5f);
  }
  return w;
}

/// sigma_max(m), the largest singular value.
double spectral_norm(const RowMatrixXf& m);

/// The script's inputs: x for two sequences' prefills and for the decode steps (batch of 2).
struct Script {
  RowMatrixXf prefill_a, prefill_b;  // (19, d), (7, d) unless chosen
  std::vector<RowMatrixXf> steps;    // (2, d) each: row 0 -> sequence b, row 1 -> sequence a
  double rope_base = 0;              // 0: no RoPE

  /// `length_b` < 7 gives a short sequence (1: a sequence of one token in the decode batch).
  static Script random(int d, std::mt19937& rng, int steps = 4, double rope_base = 0, int length_b = 7) {
    Script s{random_matrix(19, d, rng), random_matrix(length_b, d, rng), {}, rope_base};
    for (int i = 0; i < steps; ++i) s.steps.push_back(random_matrix(2, d, rng));
    return s;
  }
};

/// A layer model: the MHA weights plus what each variant needs (converted once).
struct LayerModel {
  AttentionShape shape;
  MhaWeights mha;
  SlimKWeights slim;  // empty unless converted
  XCache::Params xcache;
};

/// A random MHA layer (random_mha_weights, cond(W_k) = cond_k) converted for every variant:
/// SlimK2 where the heads are at least as wide as the input (W_k square or tall), and XCache by
/// its cheaper query path. A RoPE model has no key bias (the conversion refuses one).
inline LayerModel random_layer_model(AttentionShape shape, double cond_k, std::mt19937& rng, bool rope = false) {
  LayerModel m;
  m.shape = shape;
  m.mha = random_mha_weights(shape.input_width(), shape.query_width(), cond_k, rng);
  if (rope) m.mha.b_k.resize(0);
  if (shape.query_width() >= shape.input_width()) m.slim = convert_to_slim_k(m.mha, {.rope = rope});
  m.xcache = make_x_cache_params(m.mha, shape);
  return m;
}

namespace detail {
inline RowMatrixXf project(const RowMatrixXf& x, const RowMatrixXf& w, const Eigen::RowVectorXf& b) {
  RowMatrixXf y = x * w;
  if (b.size()) y.rowwise() += b;
  return y;
}
inline void rope_rows(RowMatrixXf& m, const std::vector<int>& pos, int head_dim, double base) {
  if (base == 0) return;
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    auto row = m.row(r);
    apply_rope(row, pos[std::size_t(r)], head_dim, base);
  }
}
}  // namespace detail

/// Runs the script through attention object `attn` (float cache); returns the stacked layer
/// outputs y (prefill a, prefill b, then each decode step's two rows).
template <class A>
RowMatrixXf run_script(A& attn, const LayerModel& m, const Script& s) {
  using V = typename A::variant_type;
  const AttentionShape shape = m.shape;
  const int e = shape.query_width(), dh = shape.head_dim;
  const int a = attn.open_sequence(), b = attn.open_sequence();
  std::vector<RowMatrixXf> ys;
  auto positions = [](int first, int n) {
    std::vector<int> p;
    for (int i = 0; i < n; ++i) p.push_back(first + i);
    return p;
  };
  // One call: x (rows) at positions pos; prefill on one sequence or decode on several.
  auto step = [&](const RowMatrixXf& x, const std::vector<int>& pos, auto&& call) {
    RowMatrixXf heads(x.rows(), e);
    if constexpr (std::is_same_v<V, XCache>) {
      call(x, typename V::Rows{x}, heads);
    } else {
      RowMatrixXf q = detail::project(x, m.mha.w_q, m.mha.b_q);
      detail::rope_rows(q, pos, dh, s.rope_base);
      if constexpr (std::is_same_v<V, Mha>) {
        RowMatrixXf k = detail::project(x, m.mha.w_k, m.mha.b_k), v = detail::project(x, m.mha.w_v, m.mha.b_v);
        detail::rope_rows(k, pos, dh, s.rope_base);
        call(q, typename V::Rows{k, v}, heads);
      } else {
        const RowMatrixXf k = x * m.mha.w_k;  // slim: no key bias, not rotated
        call(q, typename V::Rows{k}, heads);
      }
    }
    RowMatrixXf y = heads * m.mha.w_o;
    if constexpr (std::is_same_v<V, Mha> || std::is_same_v<V, XCache>) {
      if (m.mha.b_o.size()) y.rowwise() += m.mha.b_o;
    } else {  // slim: the value bias is folded into the converted output bias
      y.rowwise() += m.slim.b_o;
    }
    ys.push_back(y);
  };
  auto prefill = [&](int seq, const RowMatrixXf& x) {
    step(x, positions(attn.length(seq), int(x.rows())),
         [&](const RowMatrixXf& q, const typename V::Rows& rows, RowMatrixXf& out) { attn.prefill(seq, q, rows, Mask::causal, out); });
  };
  prefill(a, s.prefill_a);
  prefill(b, s.prefill_b);
  const int seqs[] = {b, a};
  for (const RowMatrixXf& x : s.steps)
    step(x, {attn.length(b), attn.length(a)},
         [&](const RowMatrixXf& q, const typename V::Rows& rows, RowMatrixXf& out) { attn.decode(seqs, q, rows, out); });
  Eigen::Index total = 0;
  for (auto& y : ys) total += y.rows();
  RowMatrixXf all(total, ys[0].cols());
  Eigen::Index r = 0;
  for (auto& y : ys) {
    all.middleRows(r, y.rows()) = y;
    r += y.rows();
  }
  attn.close_sequence(a);
  attn.close_sequence(b);
  return all;
}

/// The Params each variant is built with.
template <class V>
typename V::Params params_for(const LayerModel& m) {
  if constexpr (std::is_same_v<V, XCache>) return m.xcache;
  else if constexpr (std::is_same_v<V, Mha>) return {};
  else return {m.slim.w_kv};
}

inline CacheConfig script_cache() { return {.max_sequences = 2, .capacity = 40, .poison_unused = true}; }

}  // namespace polyattn::testing
