// The equivalence scenarios, run by every executor's test against the dense oracle: prefill
// (causal and full), batched decode over sequences of different lengths, cross-attention style
// attend, long sequences split across threads or blocks, head dims that are not a multiple of
// the SIMD width, and a reopened slot. Unused cache capacity is NaN, so any read past a
// sequence's end shows. `A` is an Attention<Variant, Layout, Executor, float> over a
// KV-sharing variant (Mha, Gqa<G>, Mqa).
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/core/matrix.hpp>

#include "support/dense_oracle.hpp"

namespace polyattn::testing {

/// Query heads for a scenario written for `n`: the next multiple of the variant's group size
/// (Gqa<4> and Gqa<8> need 8 where the others take 6), so every KV-sharing variant runs it.
template <class V>
constexpr int heads_for(int n) {
  if constexpr (requires { V::group_size; })
    return (n + V::group_size - 1) / V::group_size * V::group_size;
  else
    return n;
}

/// One sequence's history, kept densely for the oracle.
struct History {
  int seq = -1;
  RowMatrixXf k, v;
  void add(const RowMatrixXf& k_new, const RowMatrixXf& v_new) {
    RowMatrixXf k2(k.rows() + k_new.rows(), k_new.cols()), v2(v.rows() + v_new.rows(), v_new.cols());
    k2 << k, k_new;
    v2 << v, v_new;
    k = std::move(k2);
    v = std::move(v2);
  }
};

template <class A>
void check_prefill_then_batched_decode(int n_heads, int head_dim) {
  using V = typename A::variant_type;
  const AttentionShape shape{n_heads, head_dim};
  const int kv_width = V::kv_heads(shape) * head_dim, q_width = n_heads * head_dim;
  const int group = n_heads / V::kv_heads(shape);
  std::mt19937 rng(1234 + head_dim);
  A attn(shape, {.max_sequences = 3, .capacity = 40, .poison_unused = true}, {}, 2);

  // Three sequences of different lengths, prefilled causally (length 1 included).
  std::vector<History> hist(3);
  const int prefill_len[3] = {1, 13, 29};
  for (int s = 0; s < 3; ++s) {
    hist[std::size_t(s)].seq = attn.open_sequence();
    hist[std::size_t(s)].k.resize(0, kv_width);
    hist[std::size_t(s)].v.resize(0, kv_width);
    const int n = prefill_len[s];
    RowMatrixXf q = random_matrix(n, q_width, rng), k = random_matrix(n, kv_width, rng), v = random_matrix(n, kv_width, rng);
    RowMatrixXf out(n, q_width);
    attn.prefill(hist[std::size_t(s)].seq, q, {k, v}, Mask::causal, out);
    hist[std::size_t(s)].add(k, v);
    const RowMatrixXf expected = dense_attention(q, hist[std::size_t(s)].k, hist[std::size_t(s)].v, n_heads, group, true, 0);
    CHECK(max_abs_diff(out, expected) <= fp32_attention_tolerance(head_dim, n));
    CHECK(attn.length(hist[std::size_t(s)].seq) == n);
  }

  // Batched decode, sequences in a non-sorted order, one new token each per step.
  const std::vector<int> order = {2, 0, 1};
  std::vector<int> seqs;
  for (int i : order) seqs.push_back(hist[std::size_t(i)].seq);
  for (int step = 0; step < 5; ++step) {
    const int b = int(seqs.size());
    RowMatrixXf q = random_matrix(b, q_width, rng), k = random_matrix(b, kv_width, rng), v = random_matrix(b, kv_width, rng);
    RowMatrixXf out(b, q_width);
    attn.decode(seqs, q, {k, v}, out);
    for (int r = 0; r < b; ++r) {
      History& h = hist[std::size_t(order[std::size_t(r)])];
      h.add(k.row(r), v.row(r));
      const RowMatrixXf expected = dense_attention(q.row(r), h.k, h.v, n_heads, group, false, 0);
      INFO("step ", step, " row ", r, " length ", h.k.rows());
      CHECK(max_abs_diff(out.row(r), expected) <= fp32_attention_tolerance(head_dim, int(h.k.rows())));
    }
  }
}


template <class A>
void prefill_then_batched_decode_scenario() {
  for (int head_dim : {1, 17, 64, 72}) {
    INFO(A::name(), " head_dim ", head_dim);
    check_prefill_then_batched_decode<A>(heads_for<typename A::variant_type>(6), head_dim);
  }
}

template <class A>
void long_sequence_scenario() {
  using V = typename A::variant_type;
  const AttentionShape shape{heads_for<V>(4), 40};
  const int kv_width = V::kv_heads(shape) * shape.head_dim;
  std::mt19937 rng(7);
  A attn(shape, {.max_sequences = 2, .capacity = 1100, .poison_unused = true}, {}, 2);
  const int seq = attn.open_sequence();
  History h;
  h.k.resize(0, kv_width);
  h.v.resize(0, kv_width);
  // Prefill in chunks (the cache grows across calls), then decode past 1000 tokens.
  for (int chunk : {300, 1, 699}) {
    RowMatrixXf q = random_matrix(chunk, shape.query_width(), rng);
    RowMatrixXf k = random_matrix(chunk, kv_width, rng), v = random_matrix(chunk, kv_width, rng);
    RowMatrixXf out(chunk, shape.query_width());
    const int first = attn.length(seq);
    attn.prefill(seq, q, {k, v}, Mask::causal, out);
    h.add(k, v);
    const RowMatrixXf expected = dense_attention(q, h.k, h.v, shape.n_heads, shape.n_heads / V::kv_heads(shape), true, first);
    CHECK(max_abs_diff(out, expected) <= fp32_attention_tolerance(shape.head_dim, int(h.k.rows())));
  }
  const int one[] = {seq};
  for (int step = 0; step < 3; ++step) {
    RowMatrixXf q = random_matrix(1, shape.query_width(), rng), k = random_matrix(1, kv_width, rng), v = random_matrix(1, kv_width, rng);
    RowMatrixXf out(1, shape.query_width());
    attn.decode(one, q, {k, v}, out);
    h.add(k, v);
    const RowMatrixXf expected = dense_attention(q, h.k, h.v, shape.n_heads, shape.n_heads / V::kv_heads(shape), false, 0);
    CHECK(max_abs_diff(out, expected) <= fp32_attention_tolerance(shape.head_dim, int(h.k.rows())));
  }
}

template <class A>
void encoder_and_cross_attention_scenario() {
  using V = typename A::variant_type;
  const AttentionShape shape{heads_for<V>(6), 24};
  const int kv_width = V::kv_heads(shape) * shape.head_dim, group = shape.n_heads / V::kv_heads(shape);
  std::mt19937 rng(99);
  A attn(shape, {.max_sequences = 2, .capacity = 150, .poison_unused = true}, {}, 2);
  const int a = attn.open_sequence(), b = attn.open_sequence();
  RowMatrixXf ka = random_matrix(150, kv_width, rng), va = random_matrix(150, kv_width, rng);
  RowMatrixXf kb = random_matrix(37, kv_width, rng), vb = random_matrix(37, kv_width, rng);
  RowMatrixXf q = random_matrix(150, shape.query_width(), rng), out(150, shape.query_width());
  attn.prefill(a, q, {ka, va}, Mask::full, out);  // every query sees all 150 keys, later ones too
  CHECK(max_abs_diff(out, dense_attention(q, ka, va, shape.n_heads, group, false, 0)) <=
        fp32_attention_tolerance(shape.head_dim, 150));
  attn.append(b, {kb, vb});  // cross-attention: keys written once, queried every step
  const int seqs[] = {b, a};
  for (int step = 0; step < 3; ++step) {
    RowMatrixXf qs = random_matrix(2, shape.query_width(), rng), outs(2, shape.query_width());
    attn.attend(seqs, qs, outs);
    CHECK(max_abs_diff(outs.row(0), dense_attention(qs.row(0), kb, vb, shape.n_heads, group, false, 0)) <=
          fp32_attention_tolerance(shape.head_dim, 37));
    CHECK(max_abs_diff(outs.row(1), dense_attention(qs.row(1), ka, va, shape.n_heads, group, false, 0)) <=
          fp32_attention_tolerance(shape.head_dim, 150));
  }
  CHECK(attn.length(a) == 150);
  CHECK(attn.length(b) == 37);
}

template <class A>
void reopened_slot_scenario() {
  using V = typename A::variant_type;
  const AttentionShape shape{heads_for<V>(2), 8};
  const int kv_width = V::kv_heads(shape) * shape.head_dim, group = shape.n_heads / V::kv_heads(shape);
  std::mt19937 rng(5);
  A attn(shape, {.max_sequences = 1, .capacity = 20, .poison_unused = true}, {}, 2);
  int seq = attn.open_sequence();
  RowMatrixXf q = random_matrix(20, shape.query_width(), rng), k = random_matrix(20, kv_width, rng), v = random_matrix(20, kv_width, rng);
  RowMatrixXf out(20, shape.query_width());
  attn.prefill(seq, q, {k, v}, Mask::causal, out);
  attn.close_sequence(seq);
  seq = attn.open_sequence();
  CHECK(attn.length(seq) == 0);
  RowMatrixXf q2 = random_matrix(3, shape.query_width(), rng), k2 = random_matrix(3, kv_width, rng), v2 = random_matrix(3, kv_width, rng);
  RowMatrixXf out2(3, shape.query_width());
  attn.prefill(seq, q2, {k2, v2}, Mask::causal, out2);
  CHECK(max_abs_diff(out2, dense_attention(q2, k2, v2, shape.n_heads, group, true, 0)) <= fp32_attention_tolerance(8, 3));

  // Reopened again and grown past its previous length before any attend: a copy of the cache
  // kept elsewhere (the GPU mirror) must not take the first 3 rows as already present.
  attn.close_sequence(seq);
  seq = attn.open_sequence();
  RowMatrixXf k3 = random_matrix(15, kv_width, rng), v3 = random_matrix(15, kv_width, rng);
  attn.append(seq, {k3, v3});
  RowMatrixXf q3 = random_matrix(1, shape.query_width(), rng), out3(1, shape.query_width());
  const int one[] = {seq};
  attn.attend(one, q3, out3);
  CHECK(max_abs_diff(out3, dense_attention(q3, k3, v3, shape.n_heads, group, false, 0)) <= fp32_attention_tolerance(8, 15));
}

/// Every scenario for one Attention type, each as a doctest subcase.
template <class A>
void run_equivalence_scenarios() {
  SUBCASE("prefill then batched decode matches the dense oracle") { prefill_then_batched_decode_scenario<A>(); }
  SUBCASE("long sequences split across threads match the dense oracle") { long_sequence_scenario<A>(); }
  SUBCASE("encoder prefill (full mask) and cross-attention attend match the dense oracle") {
    encoder_and_cross_attention_scenario<A>();
  }
  SUBCASE("a closed sequence's slot is reused without reading its old rows") { reopened_slot_scenario<A>(); }
}

}  // namespace polyattn::testing
