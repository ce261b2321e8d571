// The avx512bf16_scores policy (exec/cpu/bf16_scores.hpp, exec::CpuSimdBf16Scores) over bfloat16
// caches, against exec::Reference over the same cache:
//  - Mha, Gqa<2>, Mqa on Hnd, Nhd and Paged<16>, head dims 17 and 72 (tails of a 32-element
//    chunk), and 64, which the policy leaves to the default pass (bf16_dot_key: there q' = q),
//    NaN-poisoned unused capacity, ragged sequences (one split across the threads):
//    - decode, tightly: against Reference given the query the policy scores with, q' =
//      bfloat16(q s) / s (s the softmax scale, in float as the variant folds it), within the fp32
//      bound (the products of two bfloat16 are exact, so the rounding is the only change), plus
//      the few ulps of forming q' and scaling it again;
//    - decode and prefill against Reference given q itself, within the policy's derived bound:
//      each score moves by at most 2^-8 s sum_i |q_i k_i| <= 2^-8 sqrt(dk) (entries in [-1, 1]),
//      the output, a convex combination of values in [-1, 1], by exp(2 ds) - 1 more;
//  - SlimK2 and XCache on Hnd and Paged<16>: a converted layer, executor_tolerance with the
//    query's rounding (2^-8), and outputs that differ from the default AVX-512 kernels' (so the
//    bfloat16 pass ran: it is their only difference);
//  - Mla (decoupled RoPE and preserved key parts) against the expanded computation in double over
//    the rounded rows, within the fp32 bound plus the rounding's, computed from the absorbed
//    queries and the cached rows;
//  - Mtla's decode the same way over its merged slots, read back from the cache (merged in float
//    and rounded once, so |entries| reach M = max |c^| > 1: the bounds carry M).
// And DispatchCpuSimd<cpu::avx512bf16_scores> runs the policy exactly where the CPU has
// AVX512-BF16. On a CPU without it the tests say so and pass nothing else (the kernels would
// fault); a build without AVX-512 has no policy to test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <random>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/mtla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
#include "support/executor_tolerance.hpp"
#include "support/latent_oracle.hpp"
#include "support/latent_scenarios.hpp"
#include "support/mha_layer.hpp"
#include "support/query_rounding_scenarios.hpp"
#include "support/rounded_cache.hpp"

#if POLYATTN_HAS_BF16_SCORES

using namespace polyattn;
using namespace polyattn::testing;
using bf16 = Eigen::bfloat16;
using Policy = exec::CpuSimdBf16Scores;

// The keys the policy takes, as documented: every key but those of 1-4 whole vectors of 16.
static_assert(exec::cpu::bf16_dot_key(17) && exec::cpu::bf16_dot_key(72) && exec::cpu::bf16_dot_key(120) && exec::cpu::bf16_dot_key(384) &&
              !exec::cpu::bf16_dot_key(16) && !exec::cpu::bf16_dot_key(48) && !exec::cpu::bf16_dot_key(64));

namespace {

bool cpu_has_policy() {
  if (exec::cpu::cpu_runs_avx512bf16()) return true;
  MESSAGE("this CPU has no AVX512-BF16: the bfloat16 scores policy is not run");
  return false;
}

/// The query Reference is given so that it scores with the policy's: bfloat16(q s) / s.
RowMatrixXf policy_query(const RowMatrixXf& q, float s) {
  return q.unaryExpr([s](float x) { return exec::cpu::round_to_bfloat16(x * s) / s; });
}

/// The largest score move the policy's rounding can cause for queries q (rows, query_width) against
/// the cached rows `keys` (tokens, row_width, already bfloat16): 2^-8 max over heads and tokens
/// of sum_i |s qa_i k_i|, qa the absorbed query of each head (V::prepare_queries, public), s the
/// softmax scale; the bf16 products are exact, so this is all the rounding adds.
template <class V>
double latent_score_move(AttentionShape shape, const typename V::Params& params, const RowMatrixXf& q, const RowMatrixXd& keys, double s) {
  RowMatrixXf absorbed;
  V::prepare_queries(shape, params, q, absorbed);
  const int kw = V::Absorb::row_width(shape);
  double ds = 0;
  for (Eigen::Index r = 0; r < absorbed.rows(); ++r)
    for (int h = 0; h < shape.n_heads; ++h) {
      const Eigen::VectorXd qa = absorbed.row(r).segment(std::ptrdiff_t(h) * kw, kw).cast<double>().cwiseAbs() * s;
      ds = std::max(ds, (keys.cwiseAbs() * qa).maxCoeff());
    }
  return 0x1p-8 * ds * (1 + 0x1p-20);
}

/// What the policy computes for Mla decode rows q (rows, query_width) over the whole history, in
/// double: the absorbed query of each head (V::prepare_queries), scaled in float and rounded to
/// bfloat16 as the policy rounds it, against the cached rows [latent | key part]; the softmax;
/// the attended latent through W_uv and the value bias. Only fp32 sums separate the policy from it.
template <class V>
RowMatrixXd rounded_absorbed_attention(AttentionShape shape, const typename V::Params& params, const RowMatrixXf& q, const RowMatrixXd& keys,
                                       float s) {
  RowMatrixXf absorbed;
  V::prepare_queries(shape, params, q, absorbed);
  const int kw = V::Absorb::row_width(shape), d = shape.head_dim;
  RowMatrixXd out(q.rows(), std::ptrdiff_t(shape.n_heads) * d);
  for (Eigen::Index r = 0; r < q.rows(); ++r)
    for (int h = 0; h < shape.n_heads; ++h) {
      const Eigen::VectorXd qr = absorbed.row(r).segment(std::ptrdiff_t(h) * kw, kw).unaryExpr([s](float x) {
        return double(exec::cpu::round_to_bfloat16(x * s));
      }).transpose();
      const Eigen::VectorXd scores = keys * qr;
      const Eigen::VectorXd p = (scores.array() - scores.maxCoeff()).exp().matrix();
      const Eigen::RowVectorXd attended = (p.transpose() * keys.leftCols(V::rank)) / p.sum();
      out.row(r).segment(std::ptrdiff_t(h) * d, d) = attended * params.w_uv.middleCols(std::ptrdiff_t(h) * d, d).template cast<double>();
    }
  if constexpr (requires { params.value_bias; })  // Mla's; Mtla has none
    if (params.value_bias.size() > 0) out.rowwise() += params.value_bias.template cast<double>();
  return out;
}

/// Mla's one shared row [latent (Rank) | key part], read by all heads: a row of 33 (decoupled RoPE
/// of 9) or 36 (4 heads' 4 preserved dims), which the policy scores by vdpbf16ps. Prefill of 70
/// causal rows, then 4 decode steps, against the expanded computation in double over the rounded
/// rows, within the fp32 bound plus the rounding's: a score move ds (latent_score_move) moves
/// the attended latent, a convex combination of rows in [-1, 1], by expm1(2 ds), and the output
/// by that times W_uv's largest column sum of |entries|. Decode rows, tightly: against
/// rounded_absorbed_attention, within the fp32 bound alone. And the output differs from the
/// default AVX-512 kernels' (the bfloat16 pass ran).
template <class V, class L>
void check_latent_variant() {
  const AttentionShape shape{4, 16};
  static_assert(exec::cpu::bf16_dot_key(V::Absorb::row_width(AttentionShape{4, 16})));
  std::mt19937 rng(31 + V::rank);
  const auto params = random_mla_params<V>(shape, rng, V::key_part == MlaKeyPart::preserved);
  const CacheConfig cache{.max_sequences = 1, .capacity = 80, .poison_unused = true};
  Attention<V, L, Policy, bf16> policy(shape, cache, params, 2);
  Attention<V, L, exec::BasicCpuSimd<xsimd::avx512bw>, bf16> fp32(shape, cache, params, 2);
  const int qw = V::query_width(shape), ow = V::output_width(shape), kw = V::key_part_width(shape);
  const double s = V::Absorb::softmax_scale(shape, params.scale);
  const double value_gain = params.w_uv.cwiseAbs().colwise().sum().maxCoeff();
  const int seq = policy.open_sequence();
  CHECK(fp32.open_sequence() == seq);
  LatentHistory h;
  h.latent.resize(0, V::rank);
  h.part.resize(0, kw);
  INFO(decltype(policy)::name());
  double worst = 0, moved = 0, tight = 0;
  const auto check = [&](const RowMatrixXf& q, const RowMatrixXf& got, const RowMatrixXf& want, const std::vector<int>& visible) {
    RowMatrixXd keys(h.latent.rows(), V::Absorb::row_width(shape));
    keys << h.latent.cast<double>(), h.part.cast<double>();
    const double ds = latent_score_move<V>(shape, params, q, keys, s);
    const double bound = mla_tolerance<V>(shape, int(h.latent.rows())) + std::expm1(2 * ds) * value_gain;
    const double diff = max_abs_diff(got, expanded_mla_attention<V>(shape, params, q, h, visible));
    CHECK(diff <= bound);
    worst = std::max(worst, diff / bound);
    moved = std::max(moved, max_abs_diff(got, want));
  };
  {
    const int n = 70;
    const RowMatrixXf q = random_matrix(n, qw, rng), lat = random_matrix(n, V::rank, rng), part = random_matrix(n, kw, rng);
    RowMatrixXf got(n, ow), want(n, ow);
    policy.prefill(seq, q, {lat, part}, Mask::causal, got);
    fp32.prefill(seq, q, {lat, part}, Mask::causal, want);
    h.add(rounded<bf16>(lat), rounded<bf16>(part));
    std::vector<int> visible;
    for (int t = 0; t < n; ++t) visible.push_back(t + 1);
    check(q, got, want, visible);
  }
  const int one[] = {seq};
  for (int step = 0; step < 4; ++step) {
    const RowMatrixXf q = random_matrix(1, qw, rng), lat = random_matrix(1, V::rank, rng), part = random_matrix(1, kw, rng);
    RowMatrixXf got(1, ow), want(1, ow);
    policy.decode(one, q, {lat, part}, got);
    fp32.decode(one, q, {lat, part}, want);
    h.add(rounded<bf16>(lat), rounded<bf16>(part));
    check(q, got, want, {});
    RowMatrixXd keys(h.latent.rows(), V::Absorb::row_width(shape));
    keys << h.latent.cast<double>(), h.part.cast<double>();
    const double tight_diff = max_abs_diff(got, rounded_absorbed_attention<V>(shape, params, q, keys, float(s)));
    CHECK(tight_diff <= mla_tolerance<V>(shape, int(h.latent.rows())));
    tight = std::max(tight, tight_diff);
  }
  CHECK(moved > 0);
  MESSAGE(decltype(policy)::name(), ": worst error / bound ", worst, "; decode vs the rounded absorbed query ", tight, " (bound ",
          mla_tolerance<V>(shape, 74), "); differs from the fp32 kernels by ", moved);
}

/// Mtla's merged slots [c^ (Rank) | k^R (RopeDim)] of `seq`, read back from the cache (bfloat16,
/// so exact in float): (cache rows, Rank + RopeDim).
template <class A>
RowMatrixXf cached_slots(const A& attn, int seq) {
  using V = typename A::variant_type;
  RowMatrixXf rows(attn.cache_rows(seq), V::rank + V::rope_dim);
  for (Eigen::Index r = 0; r < rows.rows(); ++r)
    for (int k = 0; k < rows.cols(); ++k) rows(r, k) = float(attn.cache().row(0, seq, int(r), 0)[k]);
  return rows;
}

/// Mtla's shared row of Rank + RopeDim merged in time, read by all heads. A causal prefill of 61
/// tokens (it only fills the cache: its block kernel keeps the fp32 query), then 8 decode steps,
/// which merge into the open slot and open new ones. Each step reads the slots back from the
/// cache (they must equal the default kernels' instance's: one writer) and checks the output:
///  - against the expanded computation in double over those slots, within the fp32 bound for
///    latents up to M = max |c^| (absorbed_tolerance, as test_mtla) plus the rounding's: a score
///    move ds (latent_score_move) moves the attended latent by expm1(2 ds) M, and the output by
///    that times W_uv's largest column sum of |entries|;
///  - tightly, against rounded_absorbed_attention, within the fp32 bound alone;
///  - and it differs from the default AVX-512 kernels' output (the bfloat16 pass ran).
template <class V, class L>
void check_merged_latent_variant() {
  const AttentionShape shape{4, 16};
  static_assert(exec::cpu::bf16_dot_key(V::Absorb::row_width(AttentionShape{4, 16})));
  std::mt19937 rng(47 + V::rank);
  const auto params = random_mtla_params<V>(shape, rng);
  const CacheConfig cache{.max_sequences = 1, .capacity = 40, .poison_unused = true};
  Attention<V, L, Policy, bf16> policy(shape, cache, params, 2);
  Attention<V, L, exec::BasicCpuSimd<xsimd::avx512bw>, bf16> fp32(shape, cache, params, 2);
  const int qw = V::query_width(shape), ow = V::output_width(shape);
  const double s = V::Absorb::softmax_scale(shape, params.scale);
  const double value_gain = params.w_uv.cwiseAbs().colwise().sum().maxCoeff();
  const int seq = policy.open_sequence();
  CHECK(fp32.open_sequence() == seq);
  INFO(decltype(policy)::name());
  {
    const int n = 61;
    RowMatrixXf got(n, ow);
    const RowMatrixXf q = random_matrix(n, qw, rng), lat = random_matrix(n, V::rank, rng), kr = random_matrix(n, V::rope_dim, rng);
    policy.prefill(seq, q, {lat, kr}, Mask::causal, got);
    fp32.prefill(seq, q, {lat, kr}, Mask::causal, got);
  }
  const int one[] = {seq};
  double worst = 0, moved = 0, tight = 0, magnitude = 0;
  for (int step = 0; step < 8; ++step) {
    const RowMatrixXf q = random_matrix(1, qw, rng), lat = random_matrix(1, V::rank, rng), kr = random_matrix(1, V::rope_dim, rng);
    RowMatrixXf got(1, ow), want(1, ow);
    policy.decode(one, q, {lat, kr}, got);
    fp32.decode(one, q, {lat, kr}, want);
    const RowMatrixXf slots = cached_slots(policy, seq);
    INFO("step ", step, ", ", slots.rows(), " slots");
    REQUIRE(slots == cached_slots(fp32, seq));
    const RowMatrixXf latent = slots.leftCols(V::rank), part = slots.rightCols(V::rope_dim);
    const double m = std::max(1.0, double(latent.cwiseAbs().maxCoeff()));
    const double fp32_bound = absorbed_tolerance(V::Absorb::row_width(shape), shape.head_dim, V::rank, int(slots.rows()), s, m);
    const RowMatrixXd keys = slots.cast<double>();
    const double ds = latent_score_move<V>(shape, params, q, keys, s);
    const double bound = fp32_bound + std::expm1(2 * ds) * m * value_gain;
    const RowMatrixXd k = expand_keys(latent, part, params.w_uk, shape.n_heads, V::rope_dim, false);
    const RowMatrixXd v = latent.cast<double>() * params.w_uv.template cast<double>();
    const double diff = max_abs_diff(got, dense_attention_f64(q.cast<double>(), k, v, shape.n_heads, s));
    CHECK(diff <= bound);
    const double tight_diff = max_abs_diff(got, rounded_absorbed_attention<V>(shape, params, q, keys, float(s)));
    CHECK(tight_diff <= fp32_bound);
    worst = std::max(worst, diff / bound);
    tight = std::max(tight, tight_diff / fp32_bound);
    moved = std::max(moved, max_abs_diff(got, want));
    magnitude = std::max(magnitude, m);
  }
  CHECK(moved > 0);
  MESSAGE(decltype(policy)::name(), ": worst error / bound ", worst, "; decode vs the rounded absorbed query, error / fp32 bound ", tight,
          "; differs from the fp32 kernels by ", moved, "; latents up to ", magnitude);
}

}  // namespace

TEST_CASE_TEMPLATE("bfloat16 scores: Mtla against the expanded computation over its merged slots within the derived bound", C,
                   Combo<Mtla<36, 3, 6>, Hnd, Policy, bf16>, Combo<Mtla<36, 3, 6>, Paged<5>, Policy, bf16>,
                   Combo<Mtla<16, 2, 4>, Nhd, Policy, bf16>) {
  if (!cpu_has_policy()) return;
  check_merged_latent_variant<typename C::variant, typename C::layout>();
}

TEST_CASE_TEMPLATE("bfloat16 scores: Mla against the expanded computation within the derived bound", C,
                   Combo<Mla<24, 9, MlaKeyPart::decoupled_rope>, Hnd, Policy, bf16>, Combo<Mla<24, 9, MlaKeyPart::decoupled_rope>, Paged<16>, Policy, bf16>,
                   Combo<Mla<20, 4, MlaKeyPart::preserved>, Nhd, Policy, bf16>) {
  if (!cpu_has_policy()) return;
  check_latent_variant<typename C::variant, typename C::layout>();
}

TEST_CASE_TEMPLATE("bfloat16 scores: Mha, Gqa and Mqa decode as Reference with the rounded query, and within the derived bound of the unrounded one",
                   C, Combo<Mha, Hnd, Policy, bf16>, Combo<Mha, Nhd, Policy, bf16>, Combo<Mha, Paged<16>, Policy, bf16>,
                   Combo<Gqa<2>, Hnd, Policy, bf16>, Combo<Gqa<2>, Paged<16>, Policy, bf16>, Combo<Mqa, Hnd, Policy, bf16>,
                   Combo<Mqa, Nhd, Policy, bf16>, Combo<Mqa, Paged<16>, Policy, bf16>) {
  if (!cpu_has_policy()) return;
  for (int head_dim : {17, 64, 72}) {
    // Against q itself: ds <= 2^-8 s sum |q k| <= 2^-8 sqrt(dk), q and k in [-1, 1].
    const auto rounding = query_rounding(policy_query, exec::cpu::bf16_dot_key(head_dim), 0x1p-8 * std::sqrt(double(head_dim)) * (1 + 0x1p-20));
    check_kv_sharing_under_policy<typename C::variant, typename C::layout, Policy, bf16>(head_dim, rounding, 7 + head_dim);
  }
}

TEST_CASE_TEMPLATE("bfloat16 scores: SlimK2 and XCache within executor_tolerance with the query's rounding", C,
                   Combo<SlimK2, Hnd, Policy, bf16>, Combo<SlimK2, Paged<16>, Policy, bf16>, Combo<XCache, Hnd, Policy, bf16>,
                   Combo<XCache, Paged<16>, Policy, bf16>) {
  if (!cpu_has_policy()) return;
  // (Each scaled query element rounded to a relative 2^-8.)
  check_converted_under_policy<typename C::variant, typename C::layout, Policy, exec::BasicCpuSimd<xsimd::avx512bw>, bf16>(0x1p-8, 23);
}

TEST_CASE("bfloat16 scores: DispatchCpuSimd runs the policy exactly where the CPU has AVX512-BF16") {
  const exec::DispatchCpuSimd<exec::cpu::avx512bf16_scores> dispatch(2);
  CHECK(dispatch.uses_arch() == exec::cpu::cpu_runs_avx512bf16());
  CHECK(exec::DispatchCpuSimd<exec::cpu::avx512bf16_scores>::name() == std::string("cpu/avx512bw+bf16_scores|") + xsimd::default_arch::name());
  CHECK(Policy::name() == "cpu/avx512bw+bf16_scores");
}

#else
TEST_CASE("bfloat16 scores: not built (the policy needs a build for AVX-512)") { MESSAGE("this build has no AVX-512: nothing to test"); }
#endif
