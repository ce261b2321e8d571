// 16-bit caches (core/cache_element.hpp) against float caches: a cache of T rounds each row once
// when it is written and reads it back exactly, so Attention<Mha, Layout, Exec, T> must give
// bit for bit what the same executor gives over a float cache fed the rows rounded to T
// beforehand (same values, same arithmetic). Run by tests/test_cache_elements.cpp (Reference)
// and tests/cuda/test_cuda_equivalence.cu (exec::Cuda). NaN-poisoned capacity.
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <type_traits>

#include <polyattn/attention.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "support/dense_oracle.hpp"

namespace polyattn::testing {

/// Unit roundoff of a 16-bit T: 2^-11 for half (11-bit significand), 2^-8 for bfloat16 (8-bit).
template <class T>
constexpr double unit_roundoff() {
  static_assert(std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>);
  return std::is_same_v<T, Eigen::half> ? 0x1p-11 : 0x1p-8;
}

template <class T>
RowMatrixXf rounded(const RowMatrixXf& m) {
  return m.cast<T>().template cast<float>();
}

/// Prefill 9 tokens, then decode the rest one by one, on one new sequence; outputs stacked.
template <class A>
RowMatrixXf prefill_then_decode(A& attn, const RowMatrixXf& q, const RowMatrixXf& k, const RowMatrixXf& v) {
  const int seq = attn.open_sequence();
  RowMatrixXf out(q.rows(), q.cols());
  attn.prefill(seq, q.topRows(9), {k.topRows(9), v.topRows(9)}, Mask::causal, out.topRows(9));
  const int seqs[] = {seq};
  for (Eigen::Index t = 9; t < q.rows(); ++t) {
    RowMatrixXf y(1, q.cols());
    attn.decode(seqs, q.row(t), {k.row(t), v.row(t)}, y);
    out.row(t) = y;
  }
  attn.close_sequence(seq);
  return out;
}

/// The scenario's inputs: 11 tokens of 4 heads of 8.
struct RoundedCacheInputs {
  AttentionShape shape{4, 8};
  CacheConfig config{.max_sequences = 2, .capacity = 16, .poison_unused = true};
  RowMatrixXf q, k, v;
  explicit RoundedCacheInputs(unsigned seed) {
    std::mt19937 rng(seed);
    q = random_matrix(11, 32, rng), k = random_matrix(11, 32, rng), v = random_matrix(11, 32, rng);
  }
};

/// Checks the T cache against the float cache of pre-rounded rows (exactly) and its bytes (half);
/// returns the T cache's outputs.
template <class T, class Layout, class Exec>
RowMatrixXf check_rounded_once(const RoundedCacheInputs& in) {
  Attention<Mha, Layout, Exec, T> low(in.shape, in.config);
  Attention<Mha, Layout, Exec, float> full_of_rounded(in.shape, in.config);
  const RowMatrixXf y = prefill_then_decode(low, in.q, in.k, in.v);
  INFO(decltype(low)::name(), " with ", sizeof(T) * 8, "-bit elements");
  CHECK(y == prefill_then_decode(full_of_rounded, in.q, rounded<T>(in.k), rounded<T>(in.v)));
  CHECK(low.cache_bytes_allocated() * 2 == full_of_rounded.cache_bytes_allocated());
  return y;
}

}  // namespace polyattn::testing
