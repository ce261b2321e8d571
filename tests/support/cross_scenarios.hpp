// The cross-attention cache options (layers/cross_cache.hpp) against MHA cross-attention
// computed densely from the encoder output: one scenario, run for every layout and executor
// (tests/test_cross_cache.cpp on the CPU executors, tests/cuda/test_cuda_equivalence.cu on the GPU).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/layers/cross_cache.hpp>

#include "support/dense_oracle.hpp"
#include "support/mha_layer.hpp"

namespace polyattn::testing {

inline constexpr double kCrossEps = 0x1p-24;

/// y = MHA cross-attention of x over E, densely in double (through dense_attention) then W_o.
inline RowMatrixXf mha_cross(const MhaWeights& w, int n_heads, const RowMatrixXf& x, const RowMatrixXf& e) {
  auto proj = [](const RowMatrixXf& a, const RowMatrixXf& m, const Eigen::RowVectorXf& b) {
    RowMatrixXf r = a * m;
    r.rowwise() += b;
    return r;
  };
  const RowMatrixXf heads =
      dense_attention(proj(x, w.w_q, w.b_q), proj(e, w.w_k, w.b_k), proj(e, w.w_v, w.b_v), n_heads, 1, false, 0);
  return proj(heads, w.w_o, w.b_o);
}

/// Unit roundoff of a cache element type T (rows are rounded to T once, when cached).
template <class T>
inline constexpr double kCacheEps = std::is_same_v<T, Eigen::half> ? 0x1p-11 : std::is_same_v<T, Eigen::bfloat16> ? 0x1p-8
                                    : std::is_same_v<T, double>     ? 0x1p-53 : kCrossEps;

/// Runs CrossAttention<Option, Layout, Exec, T> over 3 layers and two sequences of different encoder
/// lengths (one of them with two query rows in a batch) for two steps against mha_cross, then
/// checks the cache accounting and that a reopened slot has no encoder output. NaN-poisoned
/// capacity. The tolerance: float rounding through the projections, plus slim's first-order
/// error through W_kv = W_k^-1 W_v for the K-only and hybrid options (cond(W_k) = cond_k); for a
/// cache element narrower than float, the rounding of the cached rows to T, amplified by cond_k
/// where values are derived from keys.
template <class Option, class Layout, class Exec, class T = float>
void check_cross_option(double cond_k) {
  const AttentionShape shape{6, 16};  // d = e = 96
  const int d = 96, n_layers = 3;
  std::mt19937 rng(21);
  std::vector<MhaWeights> layers;
  for (int l = 0; l < n_layers; ++l) layers.push_back(random_mha_weights(d, d, cond_k, rng));
  CrossAttention<Option, Layout, Exec, T> cross(shape, layers, {.max_sequences = 3, .capacity = 64, .poison_unused = true}, 2);
  const int a = cross.open_sequence(), b = cross.open_sequence();
  const RowMatrixXf ea = random_matrix(64, d, rng), eb = random_matrix(23, d, rng);
  cross.set_encoder_output(a, ea);
  cross.set_encoder_output(b, eb);
  for (const SlimKReport& r : cross.reports()) MESSAGE(Option::name(), " ", r.summary());
  const double eps_cond = kCrossEps * cond_k * 40;  // first-order V-from-K error, as in test_slim_xcache
  // Rows rounded to T (relative error eps_T / 2 per element; the outputs are weighted means of
  // them), amplified through W_kv (cond_k) for the options that derive values from keys. Measured
  // with half and cond_k = 10: at most 8.4e-5 of the output scale, 35 times below this bound.
  const double eps_t = kCacheEps<T> > kCrossEps ? kCacheEps<T> * (1 + cond_k / 2) : 0.0;
  for (int step = 0; step < 2; ++step)
    for (int l = 0; l < n_layers; ++l) {
      // rows: b, a, then a again (a second prompt token of a)
      const int seqs[] = {b, a, a};
      const RowMatrixXf x = random_matrix(3, d, rng);
      RowMatrixXf y(3, d);
      cross.attend(l, seqs, x, y);
      RowMatrixXf expected(3, d);
      expected.row(0) = mha_cross(layers[std::size_t(l)], 6, x.row(0), eb);
      expected.bottomRows(2) = mha_cross(layers[std::size_t(l)], 6, x.bottomRows(2), ea);
      const double scale = expected.cwiseAbs().maxCoeff();
      INFO(decltype(cross)::name(), " layer ", l, " step ", step);
      CHECK(max_abs_diff(y, expected) <= (256 * kCrossEps * std::sqrt(double(d)) + eps_cond + eps_t) * scale);
    }
  // Cache held per sequence, against the accounting: E-cache p d; K-only p d per layer; KV 2 p d per layer.
  const std::size_t p = 64, per_layer = p * d * sizeof(T);
  if constexpr (std::is_same_v<Option, cross::Baseline>) CHECK(cross.cache_bytes(a) == 2 * n_layers * per_layer);
  if constexpr (std::is_same_v<Option, cross::KOnly>) CHECK(cross.cache_bytes(a) == n_layers * per_layer);
  if constexpr (std::is_same_v<Option, cross::SharedE> || std::is_same_v<Option, cross::Hybrid>) CHECK(cross.cache_bytes(a) == per_layer);
  CHECK(cross.cache_bytes(a) == p * cross.cache_bytes_per_frame());
  // Contiguous layouts allocate 3 slots of capacity 64 = p up front; a Paged<P> pool commits
  // pages as sequences need them (cache/paged.hpp), so it holds at least what a holds.
  if constexpr (requires { Layout::page_size; })
    CHECK(cross.cache_bytes_allocated() >= cross.cache_bytes(a));
  else
    CHECK(cross.cache_bytes_allocated() >= std::size_t(3) * cross.cache_bytes(a));
  cross.close_sequence(a);
  const int c = cross.open_sequence();
  CHECK(c == a);
  const int one[] = {c};
  RowMatrixXf y(1, d);
  CHECK_THROWS_AS(cross.attend(0, one, random_matrix(1, d, rng), y), ShapeError);  // no encoder output yet
}

}  // namespace polyattn::testing
