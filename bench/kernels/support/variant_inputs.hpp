// Filling a decode benchmark's caches: weights and one block of random cache rows per variant
// family, appended repeatedly (values do not change the timing, only the shapes do). Eigen only,
// no xsimd: usable from .cu benchmarks as well.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/core/matrix.hpp>
#include <polyattn/core/shape.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/mtla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

namespace polyattn::bench {

/// Rows generated once and appended repeatedly while filling a cache (filling gigabytes with
/// fresh random numbers would dominate the set-up time); fill_cache below appends
/// blocks of this size.
inline constexpr int kFillBlock = 512;

/// Appends `length` tokens to every sequence, `append_block(attn, seq, n)` appending the first n
/// (<= kFillBlock) rows of a block of random rows generated once by the caller.
template <class A, class AppendBlock>
void fill_cache(A& attn, const std::vector<int>& seqs, int length, AppendBlock&& append_block) {
  for (int seq : seqs)
    for (int done = 0; done < length;) {
      const int n = std::min(kFillBlock, length - done);
      append_block(attn, seq, n);
      done += n;
    }
}

inline RowMatrixXf uniform(Eigen::Index rows, Eigen::Index cols, std::mt19937& rng, float range = 1.f) {
  std::uniform_real_distribution<float> dist(-range, range);
  return RowMatrixXf::NullaryExpr(rows, cols, [&] { return dist(rng); });
}

/// params(shape, rng): the variant's weights; rows(n): the first n (<= kFillBlock) rows of the block.
template <class V>
struct Inputs {  // MHA / GQA / MQA
  static typename V::Params params(AttentionShape, std::mt19937&) { return {}; }
  RowMatrixXf k, v;
  Inputs(AttentionShape s, std::mt19937& rng)
      : k(uniform(kFillBlock, V::kv_heads(s) * s.head_dim, rng)), v(uniform(kFillBlock, V::kv_heads(s) * s.head_dim, rng)) {}
  typename V::Rows rows(int n) const { return {k.topRows(n), v.topRows(n)}; }
};

template <class Option, class Positions>
struct Inputs<SlimK<Option, Positions>> {  // K-only cache: W_kv (e, e) and key rows
  using V = SlimK<Option, Positions>;
  static typename V::Params params(AttentionShape s, std::mt19937& rng) {
    return {uniform(s.query_width(), s.query_width(), rng, 1.f / float(s.query_width())), 10000.0};
  }
  RowMatrixXf k;
  Inputs(AttentionShape s, std::mt19937& rng) : k(uniform(kFillBlock, s.query_width(), rng)) {}
  typename V::Rows rows(int n) const { return {k.topRows(n)}; }
};

template <>
struct Inputs<XCache> {  // the layer input x is cached; projection weights for the queries and outputs
  static XCache::Params params(AttentionShape s, std::mt19937& rng) {
    const int d = s.input_width(), e = s.query_width();
    const float r = 1.f / std::sqrt(float(d));
    MhaWeights w;
    w.w_q = uniform(d, e, rng, r);
    w.w_k = uniform(d, e, rng, r);
    w.w_v = uniform(d, e, rng, r);
    w.w_o = uniform(e, d, rng, 1.f / std::sqrt(float(e)));
    return make_x_cache_params(w, s);  // the cheaper query path for the shape
  }
  RowMatrixXf x;
  Inputs(AttentionShape s, std::mt19937& rng) : x(uniform(kFillBlock, s.input_width(), rng)) {}
  XCache::Rows rows(int n) const { return {x.topRows(n)}; }
};

template <int R, int K, MlaKeyPart P>
struct Inputs<Mla<R, K, P>> {
  using V = Mla<R, K, P>;
  static typename V::Params params(AttentionShape s, std::mt19937& rng) {
    return {uniform(R, s.n_heads * V::nope_dim(s), rng, 0.1f), uniform(R, s.n_heads * s.head_dim, rng, 0.1f), {}, 0};
  }
  RowMatrixXf latent, part;
  Inputs(AttentionShape s, std::mt19937& rng) : latent(uniform(kFillBlock, R, rng)), part(uniform(kFillBlock, V::key_part_width(s), rng)) {}
  typename V::Rows rows(int n) const { return {latent.topRows(n), part.topRows(n)}; }
};

template <int R, int S, int D>
struct Inputs<Mtla<R, S, D>> {
  using V = Mtla<R, S, D>;
  static typename V::Params params(AttentionShape s, std::mt19937& rng) {
    typename V::Params p;
    p.w_uk = uniform(R, s.n_heads * s.head_dim, rng, 0.1f);
    p.w_uv = uniform(R, s.n_heads * s.head_dim, rng, 0.1f);
    p.ln_gamma = Eigen::RowVectorXf::Ones(R);
    p.ln_beta = Eigen::RowVectorXf::Zero(R);
    p.pos_weight = uniform(R, V::hyper_dim, rng, 0.1f);
    p.latent_weight = uniform(R, V::hyper_dim, rng, 0.1f);
    p.pos_bias = p.latent_bias = Eigen::RowVectorXf::Zero(V::hyper_dim);
    return p;
  }
  RowMatrixXf latent, rope;
  Inputs(AttentionShape, std::mt19937& rng) : latent(uniform(kFillBlock, R, rng)), rope(uniform(kFillBlock, D, rng)) {}
  typename V::Rows rows(int n) const { return {latent.topRows(n), rope.topRows(n)}; }
};

}  // namespace polyattn::bench
