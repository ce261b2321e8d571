// The checks a reduced-precision scores policy (exec::CpuSimdBf16Scores, exec::CpuSimdInt8Scores:
// the query rounded before decode's score pass) passes through the public API, shared by
// test_bf16_scores.cpp and test_int8_scores.cpp. Each test gives the policy's rounding of the
// query and its derived bound; the scenario runs the layers and checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <polyattn/polyattn.hpp>

#include "support/dense_oracle.hpp"
#include "support/executor_tolerance.hpp"
#include "support/mha_layer.hpp"

namespace polyattn::testing {

/// How a policy rounds decode's queries for a Mha/Gqa/Mqa layer of 6 heads of `head_dim`:
/// `rounded(q, s)` the query exec::Reference is given so that it scores with the policy's (the
/// scaled query q s rounded as the policy rounds it, over s); `rounds`, whether the policy rounds
/// at this head dim at all; `score_move`, the largest score move the rounding causes with q and
/// the cached keys in [-1, 1].
template <class RoundQuery>
struct QueryRounding {
  RoundQuery rounded;
  bool rounds;
  double score_move;
};

/// (No class template argument deduction for aggregates before clang 17.)
template <class RoundQuery>
QueryRounding<RoundQuery> query_rounding(RoundQuery rounded, bool rounds, double score_move) {
  return {rounded, rounds, score_move};
}

/// Mha, Gqa or Mqa on layout L with element T, 6 heads of head_dim, NaN-poisoned capacity:
/// causal prefills of 300 (split across the two threads), 1 and 13 tokens, then 3 batched decode
/// steps in reverse order. Decode equals exec::Reference given the rounded query within the fp32
/// bound (tight), and Reference given q within the fp32 bound plus expm1(2 score_move) (loose: the
/// output, a convex combination of values in [-1, 1]); prefill within the loose bound. Where the
/// policy rounds, the two References differ by more than the tight bound (so a policy that scored
/// with another query would fail it); where it does not, they agree exactly.
template <class V, class L, class Policy, class T, class RoundQuery>
void check_kv_sharing_under_policy(int head_dim, const QueryRounding<RoundQuery>& rounding, std::uint32_t seed) {
  const AttentionShape shape{6, head_dim};
  const int kv_width = V::kv_heads(shape) * head_dim, q_width = shape.query_width();
  const float s = float(1.0 / std::sqrt(double(head_dim)));
  const CacheConfig cache{.max_sequences = 3, .capacity = 310, .poison_unused = true};
  Attention<V, L, Policy, T> policy(shape, cache, {}, 2);
  // Two Reference layers over the same history (the same keys and values): one is given q' at
  // decode, the other q.
  Attention<V, L, exec::Reference, T> ref(shape, cache, {}, 2), ref_plain(shape, cache, {}, 2);
  std::mt19937 rng(seed);
  // Tight: the fp32 bound; q' costs each query element 2 roundings (q~ / s, and s again inside).
  const double tight = fp32_attention_tolerance(head_dim, 303) + 2 * (2 * 0x1p-24 * std::sqrt(double(head_dim)));
  const double loose = fp32_attention_tolerance(head_dim, 303) + std::expm1(2 * rounding.score_move);
  INFO(decltype(policy)::name(), ", head_dim ", head_dim);
  std::vector<int> seqs;
  double prefill_diff = 0;
  for (int length : {300, 1, 13}) {  // 300: split across the two threads
    seqs.push_back(policy.open_sequence());
    CHECK(ref.open_sequence() == seqs.back());
    CHECK(ref_plain.open_sequence() == seqs.back());
    const RowMatrixXf q = random_matrix(length, q_width, rng), k = random_matrix(length, kv_width, rng),
                      v = random_matrix(length, kv_width, rng);
    RowMatrixXf got(length, q_width), want(length, q_width);
    policy.prefill(seqs.back(), q, {k, v}, Mask::causal, got);
    ref.prefill(seqs.back(), q, {k, v}, Mask::causal, want);
    ref_plain.prefill(seqs.back(), q, {k, v}, Mask::causal, want);
    prefill_diff = std::max(prefill_diff, max_abs_diff(got, want));
  }
  CHECK(prefill_diff <= loose);
  std::reverse(seqs.begin(), seqs.end());
  double tight_diff = 0, loose_diff = 0, moved = 0;
  for (int step = 0; step < 3; ++step) {
    const RowMatrixXf q = random_matrix(3, q_width, rng), k = random_matrix(3, kv_width, rng), v = random_matrix(3, kv_width, rng);
    RowMatrixXf got(3, q_width), want(3, q_width), plain(3, q_width);
    policy.decode(seqs, q, {k, v}, got);
    ref.decode(seqs, rounding.rounds ? rounding.rounded(q, s) : q, {k, v}, want);
    ref_plain.decode(seqs, q, {k, v}, plain);
    tight_diff = std::max(tight_diff, max_abs_diff(got, want));
    loose_diff = std::max(loose_diff, max_abs_diff(got, plain));
    moved = std::max(moved, max_abs_diff(want, plain));
  }
  CHECK(tight_diff <= tight);
  CHECK(loose_diff <= loose);
  if (rounding.rounds)
    CHECK(moved > tight);
  else
    CHECK(moved == 0);
  MESSAGE(decltype(policy)::name(), ", head_dim ", head_dim, ": policy vs Reference(q') ", tight_diff, " (bound ", tight, "); vs Reference(q) ",
          loose_diff, " (bound ", loose, "; the rounding alone moves ", moved, ")");
}

/// SlimK2 or XCache on layout L with element T: a converted layer (6 heads of 20, input width
/// 120) through run_script, against exec::Reference within executor_tolerance with the policy's
/// `query_roundoff` and the growth of the norms by the cache's rounding (norm_growth: they are
/// measured on the unrounded rows); and its output differs from that of `Default`,
/// the kernels the policy changes (deterministic both, the same split over the threads and order
/// of sums: they differ only if the policy's pass ran).
template <class V, class L, class Policy, class Default, class T>
void check_converted_under_policy(double query_roundoff, std::uint32_t seed) {
  const AttentionShape shape{6, 20};
  std::mt19937 rng(seed);
  const LayerModel m = random_layer_model(shape, 10.0, rng);
  const Script s = Script::random(shape.input_width(), rng, 4, 0.0, 1);
  Attention<V, L, Policy, T> policy(shape, script_cache(), params_for<V>(m), 2);
  Attention<V, L, exec::Reference, T> ref(shape, script_cache(), params_for<V>(m), 2);
  Attention<V, L, Default, T> fp32(shape, script_cache(), params_for<V>(m), 2);
  const double growth = norm_growth<T>(std::max(shape.input_width(), shape.query_width()));
  const double tol = executor_tolerance<V>(m, s, script_cache().capacity, query_roundoff) * growth * growth;
  INFO(decltype(policy)::name());
  const RowMatrixXf got = run_script(policy, m, s);
  const double diff = max_abs_diff(got, run_script(ref, m, s)), moved = max_abs_diff(got, run_script(fp32, m, s));
  CHECK(diff <= tol);
  CHECK(moved > 0);
  MESSAGE(decltype(policy)::name(), ": vs Reference ", diff, " (bound ", tol, "); differs from the default kernels by ", moved);
}

}  // namespace polyattn::testing
