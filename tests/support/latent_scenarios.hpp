// The latent variants' scenarios, run by every executor's test (CPU in test_mla.cpp and
// test_mtla.cpp, CUDA in cuda/test_cuda_equivalence.cu): prefill of several lengths (1 included)
// and batched decode for Mla against the expanded computation in double; decode, chunked prefill,
// batched decode and a reopened slot for Mtla against its parallel path. Unused cache capacity
// is NaN, so any read past a sequence's end shows. `A` is an Attention<Variant, Layout, Executor>.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/core/matrix.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/mtla.hpp>

#include "support/latent_oracle.hpp"

namespace polyattn::testing {

// ---- Mla ---------------------------------------------------------------------------------------

/// Bounded random up-projections (see absorbed_tolerance), with or without a value bias.
template <class V>
typename V::Params random_mla_params(AttentionShape s, std::mt19937& rng, bool with_bias) {
  typename V::Params p;
  const int nope = V::nope_dim(s);
  p.w_uk = bounded_weight(V::rank, s.n_heads * nope, nope, rng);
  p.w_uv = bounded_weight(V::rank, s.n_heads * s.head_dim, V::rank, rng);
  if (with_bias) p.value_bias = random_matrix(1, s.n_heads * s.head_dim, rng, 0.5f);
  return p;
}

/// One sequence's cached latent rows and key parts, kept densely for the oracle.
struct LatentHistory {
  int seq = -1;
  RowMatrixXf latent, part;
  void add(const RowMatrixXf& l, const RowMatrixXf& k) {
    RowMatrixXf l2(latent.rows() + l.rows(), l.cols()), k2(part.rows() + k.rows(), k.cols());
    l2 << latent, l;
    k2 << part, k;
    latent = std::move(l2);
    part = std::move(k2);
  }
};

/// The non-absorbed computation in double: expanded keys and values, plain softmax.
template <class V>
RowMatrixXd expanded_mla_attention(AttentionShape s, const typename V::Params& p, const RowMatrixXf& q, const LatentHistory& h,
                                   const std::vector<int>& visible) {
  const RowMatrixXd k = expand_keys(h.latent, h.part, p.w_uk, s.n_heads, V::key_part_dim, V::key_part == MlaKeyPart::preserved);
  RowMatrixXd v = h.latent.cast<double>() * p.w_uv.template cast<double>();
  if (p.value_bias.size() > 0) v.rowwise() += p.value_bias.template cast<double>();
  return dense_attention_f64(q.cast<double>(), k, v, s.n_heads, 1.0 / std::sqrt(double(V::query_head_dim(s))), visible);
}

template <class V>
double mla_tolerance(AttentionShape s, int tokens) {
  return absorbed_tolerance(V::Absorb::row_width(s), V::nope_dim(s), V::rank, tokens, 1.0 / std::sqrt(double(V::query_head_dim(s))));
}

/// Three sequences prefilled causally (1, 13 and 29 tokens), then 5 batched decode steps in a
/// non-sorted order; every output against the expanded computation.
template <class A>
void mla_prefill_then_batched_decode_scenario(AttentionShape s) {
  using V = typename A::variant_type;
  std::mt19937 rng(4321 + V::rank);
  const auto params = random_mla_params<V>(s, rng, V::key_part == MlaKeyPart::preserved);
  A attn(s, {.max_sequences = 3, .capacity = 40, .poison_unused = true}, params, 2);
  const int qw = V::query_width(s), ow = V::output_width(s), kw = V::key_part_width(s);

  std::vector<LatentHistory> hist(3);
  const int prefill_len[3] = {1, 13, 29};
  for (int i = 0; i < 3; ++i) {
    LatentHistory& h = hist[std::size_t(i)];
    h.seq = attn.open_sequence();
    h.latent.resize(0, V::rank);
    h.part.resize(0, kw);
    const int n = prefill_len[i];
    RowMatrixXf q = random_matrix(n, qw, rng), lat = random_matrix(n, V::rank, rng), part = random_matrix(n, kw, rng), out(n, ow);
    attn.prefill(h.seq, q, {lat, part}, Mask::causal, out);
    h.add(lat, part);
    std::vector<int> visible;
    for (int t = 0; t < n; ++t) visible.push_back(t + 1);
    INFO(A::name(), " prefill of ", n);
    CHECK(max_abs_diff(out, expanded_mla_attention<V>(s, params, q, h, visible)) <= mla_tolerance<V>(s, n));
    CHECK(attn.length(h.seq) == n);
  }

  const std::vector<int> order = {2, 0, 1};
  std::vector<int> seqs;
  for (int i : order) seqs.push_back(hist[std::size_t(i)].seq);
  for (int step = 0; step < 5; ++step) {
    const int b = int(seqs.size());
    RowMatrixXf q = random_matrix(b, qw, rng), lat = random_matrix(b, V::rank, rng), part = random_matrix(b, kw, rng), out(b, ow);
    attn.decode(seqs, q, {lat, part}, out);
    for (int r = 0; r < b; ++r) {
      LatentHistory& h = hist[std::size_t(order[std::size_t(r)])];
      h.add(lat.row(r), part.row(r));
      INFO(A::name(), " step ", step, " row ", r, " length ", h.latent.rows());
      CHECK(max_abs_diff(out.row(r), expanded_mla_attention<V>(s, params, q.row(r), h, {})) <=
            mla_tolerance<V>(s, int(h.latent.rows())));
    }
  }
}

// ---- Mtla --------------------------------------------------------------------------------------

/// Bounded up-projections, a LayerNorm near identity, a hyper-network of moderate weights.
template <class V>
typename V::Params random_mtla_params(AttentionShape s, std::mt19937& rng) {
  typename V::Params p;
  p.w_uk = bounded_weight(V::rank, s.n_heads * s.head_dim, s.head_dim, rng);
  p.w_uv = bounded_weight(V::rank, s.n_heads * s.head_dim, V::rank, rng);
  p.ln_gamma = (random_matrix(1, V::rank, rng, 0.5f).array() + 1.0f).matrix();
  p.ln_beta = random_matrix(1, V::rank, rng, 0.2f);
  p.pos_weight = random_matrix(V::rank, V::hyper_dim, rng, 0.5f);
  p.pos_bias = random_matrix(1, V::hyper_dim, rng, 0.5f);
  p.latent_weight = random_matrix(V::rank, V::hyper_dim, rng, 0.5f);
  p.latent_bias = random_matrix(1, V::hyper_dim, rng, 0.5f);
  return p;
}

/// One sequence's inputs so far (queries, latents, RoPE keys), for the parallel path.
struct MtlaTokens {
  int seq = -1;
  RowMatrixXf q, lat, kr;
  void add(const RowMatrixXf& q2, const RowMatrixXf& l2, const RowMatrixXf& k2) {
    auto cat = [](RowMatrixXf& a, const RowMatrixXf& b) {
      RowMatrixXf c(a.rows() + b.rows(), b.cols());
      c << a, b;
      a = std::move(c);
    };
    cat(q, q2);
    cat(lat, l2);
    cat(kr, k2);
  }
};

/// Sequence a: 13 single-token decodes; sequence b: causal prefill of 7 then 2 (chunks start
/// mid-slot for stride > 1); 3 batched decode steps of both; b closed and its slot reopened for a
/// prefill of 5. Every output against the parallel path in double. Capacity: 16 rows, which is
/// 16 tokens at stride 1.
template <class A>
void mtla_decode_prefill_scenario(AttentionShape s) {
  using V = typename A::variant_type;
  const int qw = V::query_width(s), ow = V::output_width(s);
  const double tol = 1e-5;  // outputs are O(1): entries of q, latent, RoPE key in [-1, 1], bounded weights
  std::mt19937 rng(900 + V::stride);
  const auto p = random_mtla_params<V>(s, rng);
  A attn(s, {.max_sequences = 3, .capacity = 16, .poison_unused = true}, p, 2);
  auto parallel_last_rows = [&](const MtlaTokens& t, int n) {
    const RowMatrixXd all = mtla_parallel_oracle<V>(s.n_heads, s.head_dim, p, t.q, t.lat, t.kr);
    return RowMatrixXd(all.bottomRows(n));
  };
  auto fresh = [&](int n) {
    return std::tuple{random_matrix(n, qw, rng), random_matrix(n, V::rank, rng), random_matrix(n, V::rope_dim, rng)};
  };

  MtlaTokens a{attn.open_sequence(), RowMatrixXf(0, qw), RowMatrixXf(0, V::rank), RowMatrixXf(0, V::rope_dim)};
  const int only_a[] = {a.seq};
  for (int i = 0; i < 13; ++i) {
    auto [q, lat, kr] = fresh(1);
    RowMatrixXf out(1, ow);
    attn.decode(only_a, q, {lat, kr}, out);
    a.add(q, lat, kr);
    INFO(A::name(), " decode token ", i);
    CHECK(max_abs_diff(out, parallel_last_rows(a, 1)) <= tol);
  }
  CHECK(attn.length(a.seq) == 13);
  CHECK(attn.cache_rows(a.seq) == (13 + V::stride - 1) / V::stride);

  MtlaTokens b{attn.open_sequence(), RowMatrixXf(0, qw), RowMatrixXf(0, V::rank), RowMatrixXf(0, V::rope_dim)};
  for (int chunk : {7, 2}) {
    auto [q, lat, kr] = fresh(chunk);
    RowMatrixXf out(chunk, ow);
    attn.prefill(b.seq, q, {lat, kr}, Mask::causal, out);
    b.add(q, lat, kr);
    INFO(A::name(), " prefill chunk of ", chunk);
    CHECK(max_abs_diff(out, parallel_last_rows(b, chunk)) <= tol);
  }

  const int ba[] = {b.seq, a.seq};
  for (int step = 0; step < 3; ++step) {
    auto [q, lat, kr] = fresh(2);
    RowMatrixXf out(2, ow);
    attn.decode(ba, q, {lat, kr}, out);
    b.add(q.row(0), lat.row(0), kr.row(0));
    a.add(q.row(1), lat.row(1), kr.row(1));
    INFO(A::name(), " batched step ", step);
    CHECK(max_abs_diff(out.row(0), parallel_last_rows(b, 1)) <= tol);
    CHECK(max_abs_diff(out.row(1), parallel_last_rows(a, 1)) <= tol);
  }
  CHECK(attn.length(a.seq) == 16);
  CHECK(attn.length(b.seq) == 12);
  CHECK(attn.cache_bytes_used(a.seq) == std::size_t((16 + V::stride - 1) / V::stride) * (V::rank + V::rope_dim) * sizeof(float));

  // A closed slot is reused from token 0.
  attn.close_sequence(b.seq);
  MtlaTokens c{attn.open_sequence(), RowMatrixXf(0, qw), RowMatrixXf(0, V::rank), RowMatrixXf(0, V::rope_dim)};
  CHECK(c.seq == b.seq);
  CHECK(attn.length(c.seq) == 0);
  auto [q, lat, kr] = fresh(5);
  RowMatrixXf out(5, ow);
  attn.prefill(c.seq, q, {lat, kr}, Mask::causal, out);
  c.add(q, lat, kr);
  CHECK(max_abs_diff(out, parallel_last_rows(c, 5)) <= tol);
}

}  // namespace polyattn::testing
