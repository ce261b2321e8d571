// The fork scenario every executor runs (tests/test_fork.cpp on the CPU executors,
// tests/cuda/test_cuda_equivalence.cu on exec::Cuda): a child sequence forked from a parent, both
// decoding on, the parent closed and its slot reused, a fork of a fork, each compared bit for bit
// with a replay (the same tokens written afresh into sequences of a second Attention on the same
// executor), with unused capacity NaN.
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/convert/x_cache.hpp>

#include "support/dense_oracle.hpp"
#include "support/latent_scenarios.hpp"
#include "support/mha_layer.hpp"

namespace polyattn::testing {

/// Random cache rows for n tokens of variant V, owned (V::Rows only refers to matrices): (k, v)
/// for the KV-sharing variants, (latent, RoPE key) for Mtla, (latent, key part) for Mla, k for
/// slim attention, x for the X-cache.
template <class V>
struct RandomRows {
  RowMatrixXf first, second;
  RandomRows(AttentionShape s, int n, std::mt19937& rng) {
    if constexpr (requires(typename V::Rows r) { r.rope_key; }) {  // Mtla
      first = random_matrix(n, V::rank, rng);
      second = random_matrix(n, V::rope_dim, rng);
    } else if constexpr (requires(typename V::Rows r) { r.key_part; }) {  // Mla
      first = random_matrix(n, V::rank, rng);
      second = random_matrix(n, V::key_part_width(s), rng);
    } else if constexpr (requires(typename V::Rows r) { r.k; r.v; }) {
      first = random_matrix(n, V::kv_heads(s) * s.head_dim, rng);
      second = random_matrix(n, V::kv_heads(s) * s.head_dim, rng);
    } else if constexpr (requires(typename V::Rows r) { r.k; }) {  // SlimK
      first = random_matrix(n, s.query_width(), rng);
    } else {  // XCache
      first = random_matrix(n, s.input_width(), rng);
    }
  }
  typename V::Rows view() const {
    if constexpr (requires(typename V::Rows r) { r.k; r.v; } || requires(typename V::Rows r) { r.latent; })
      return {first, second};
    else
      return {first};
  }
};

template <class V>
typename V::Params params_for(AttentionShape s, std::mt19937& rng) {
  if constexpr (requires(typename V::Rows r) { r.rope_key; })
    return random_mtla_params<V>(s, rng);
  else if constexpr (requires(typename V::Rows r) { r.key_part; })
    return random_mla_params<V>(s, rng, true);
  else if constexpr (std::is_same_v<V, XCache>)
    return make_x_cache_params(random_mha_weights(s.input_width(), s.query_width(), 4.0, rng), s);
  else if constexpr (requires(typename V::Params p) { p.w_kv; })
    return {random_matrix(s.query_width(), s.query_width(), rng)};
  else
    return {};
}

/// Decodes one token into each of `seqs` (row i of `rows` into seqs[i]); returns the outputs.
template <class A>
RowMatrixXf decode(A& attn, std::vector<int> seqs, const RowMatrixXf& q, const typename A::Rows& rows) {
  RowMatrixXf out(q.rows(), A::variant_type::output_width(attn.shape()));
  attn.decode(seqs, q, rows, out);
  return out;
}

template <class A>
void fork_equals_replay() {
  using V = typename A::variant_type;
  const AttentionShape s{4, 8};
  std::mt19937 rng(77);
  const auto params = params_for<V>(s, rng);
  const int qw = V::query_width(s), ow = V::output_width(s);
  const CacheConfig config{.max_sequences = 4, .capacity = 40, .poison_unused = true};
  A forked(s, config, params, 2), replayed(s, config, params, 2);

  // A prefix of 10 tokens: with Paged<4>, two full pages and one partly filled (with Mtla<.., 3>,
  // 4 rows, the last still open).
  const int n0 = 10;
  const RandomRows<V> prefix(s, n0, rng);
  const RowMatrixXf q0 = random_matrix(n0, qw, rng);
  RowMatrixXf out0(n0, ow);
  const int parent = forked.open_sequence();
  forked.prefill(parent, q0, prefix.view(), Mask::causal, out0);
  const int child = forked.fork(parent);
  CHECK(forked.length(child) == n0);
  const int x = replayed.open_sequence(), y = replayed.open_sequence();
  replayed.prefill(x, q0, prefix.view(), Mask::causal, out0);
  replayed.prefill(y, q0, prefix.view(), Mask::causal, out0);

  // `steps` decode steps of the same new tokens into forked_seqs and replayed_seqs, batched
  // together, whose outputs must be equal bit for bit.
  const auto same_steps = [&](std::vector<int> forked_seqs, std::vector<int> replayed_seqs, int steps, const char* what) {
    const int b = int(forked_seqs.size());
    for (int step = 0; step < steps; ++step) {
      const RowMatrixXf q = random_matrix(b, qw, rng);
      const RandomRows<V> rows(s, b, rng);
      INFO(what, ", step ", step);
      CHECK((decode(forked, forked_seqs, q, rows.view()) == decode(replayed, replayed_seqs, q, rows.view())));
    }
  };
  // Both go on with different tokens, batched together.
  same_steps({parent, child}, {x, y}, 6, "after the fork");
  // The parent's close frees only what the child does not hold; the child reads on, and a new
  // sequence opened in the parent's slot overwrites nothing of it.
  forked.close_sequence(parent);
  replayed.close_sequence(x);
  const int other = forked.open_sequence(), other_replayed = replayed.open_sequence();
  const RandomRows<V> other_rows(s, 7, rng);
  const RowMatrixXf q_other = random_matrix(7, qw, rng);
  RowMatrixXf out_other(7, ow);
  forked.prefill(other, q_other, other_rows.view(), Mask::causal, out_other);
  replayed.prefill(other_replayed, q_other, other_rows.view(), Mask::causal, out_other);
  same_steps({child, other}, {y, other_replayed}, 5, "after the parent's close");
  // A fork of a fork, then the middle one closed: the grandchild goes on as y does.
  const int grandchild = forked.fork(child);
  CHECK(forked.length(grandchild) == replayed.length(y));
  forked.close_sequence(child);
  same_steps({grandchild}, {y}, 1, "a fork of a fork");
}

}  // namespace polyattn::testing
