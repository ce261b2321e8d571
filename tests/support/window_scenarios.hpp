// The sliding-window scenario every executor runs (tests/test_key_masks.cpp on the CPU executors,
// tests/cuda/test_cuda_equivalence.cu on exec::Cuda): an Attention<V, L, E, float,
// SlidingWindow<W>> over Mha, Gqa<G>, Mqa or SlimK2 (with W_kv = I it is MHA with V = K), three
// sequences prefilled causally (1, 23 and 40 + 30 tokens: a chunk after earlier tokens), then
// ragged batched decode, each output against the dense oracle with the window, with unused
// capacity NaN.
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/slim_k.hpp>

#include "support/dense_oracle.hpp"

namespace polyattn::testing {

/// Query heads per key head as the oracle sees the variant (SlimK2 with W_kv = I: MHA).
template <class V>
int oracle_group(AttentionShape s) {
  if constexpr (std::is_same_v<V, SlimK2>)
    return 1;
  else
    return s.n_heads / V::kv_heads(s);
}

/// A's rows and the oracle's (K, V) for n tokens: the variant's own for Mha/Gqa/Mqa; for SlimK2,
/// whose W_kv is the identity here, K and V = K.
template <class V>
struct OracleRows {
  RowMatrixXf k, v;
  OracleRows(AttentionShape s, int n, std::mt19937& rng) {
    const int width = s.query_width() / oracle_group<V>(s);
    k = random_matrix(n, width, rng);
    v = std::is_same_v<V, SlimK2> ? k : random_matrix(n, width, rng);
  }
  typename V::Rows view() const {
    if constexpr (std::is_same_v<V, SlimK2>)
      return {k};
    else
      return {k, v};
  }
};

template <class V>
typename V::Params identity_params(AttentionShape s) {
  if constexpr (std::is_same_v<V, SlimK2>)
    return {RowMatrixXf::Identity(s.query_width(), s.query_width())};
  else
    return {};
}

template <class A>
void window_prefill_and_decode() {
  using V = typename A::variant_type;
  constexpr int W = A::mask_type::window;
  const AttentionShape s{4, 40};  // a head dim that is not a multiple of the SIMD width
  const int group = oracle_group<V>(s);
  std::mt19937 rng(21);
  A attn(s, {.max_sequences = 3, .capacity = 160, .poison_unused = true}, identity_params<V>(s), 2);
  struct Seq {
    int id;
    RowMatrixXf k, v;
  };
  std::vector<Seq> seqs;
  // Prefill in chunks (the second after the first's tokens), lengths 1, 23 and 70 (40 + 30).
  for (const std::vector<int>& chunks : {std::vector<int>{1}, {23}, {40, 30}}) {
    Seq q_seq{attn.open_sequence(), RowMatrixXf(0, s.query_width() / group), RowMatrixXf(0, s.query_width() / group)};
    for (int n : chunks) {
      const OracleRows<V> rows(s, n, rng);
      const RowMatrixXf q = random_matrix(n, s.query_width(), rng);
      RowMatrixXf out(n, s.query_width());
      const int first_pos = int(q_seq.k.rows());
      attn.prefill(q_seq.id, q, rows.view(), Mask::causal, out);
      RowMatrixXf k(first_pos + n, rows.k.cols()), v(first_pos + n, rows.v.cols());
      k << q_seq.k, rows.k;
      v << q_seq.v, rows.v;
      q_seq.k = k;
      q_seq.v = v;
      CHECK(max_abs_diff(out, dense_attention(q, k, v, s.n_heads, group, true, first_pos, {.window = W, .keeps = {}})) <=
            fp32_attention_tolerance(s.head_dim, W));
    }
    seqs.push_back(q_seq);
  }
  // Batched decode, in an order that is not the slots'.
  const std::vector<int> order{2, 0, 1};
  std::vector<int> ids;
  for (int i : order) ids.push_back(seqs[std::size_t(i)].id);
  for (int step = 0; step < 4; ++step) {
    const OracleRows<V> rows(s, 3, rng);
    const RowMatrixXf q = random_matrix(3, s.query_width(), rng);
    RowMatrixXf out(3, s.query_width());
    attn.decode(ids, q, rows.view(), out);
    for (int b = 0; b < 3; ++b) {
      Seq& seq = seqs[std::size_t(order[std::size_t(b)])];
      RowMatrixXf k(seq.k.rows() + 1, seq.k.cols()), v(seq.v.rows() + 1, seq.v.cols());
      k << seq.k, rows.k.row(b);
      v << seq.v, rows.v.row(b);
      seq.k = k;
      seq.v = v;
      const RowMatrixXf expected = dense_attention(RowMatrixXf(q.row(b)), k, v, s.n_heads, group, true, int(k.rows()) - 1, {.window = W, .keeps = {}});
      CAPTURE(step);
      CAPTURE(b);
      CHECK(max_abs_diff(RowMatrixXf(out.row(b)), expected) <= fp32_attention_tolerance(s.head_dim, W));
    }
  }
}

}  // namespace polyattn::testing
