// The int8 scores policy (exec/cpu/int8_scores.hpp): decode's score pass over int8 keys (wider
// than 64 or not a whole number of 16: int8_dot_key) by AVX512-VNNI against each head's query
// rounded to int8 codes, q~ = step * codes with step =
// max |q_h| / 127. Checked through the public API over int8 caches, NaN-poisoned capacity and
// ragged sequences (one split across the two threads):
//  - Mha on Hnd, Gqa<2> on Paged<16>, Mqa on Nhd, at head dims 17, 64 and 72: decode equals
//    exec::Reference given the policy's query q' = q~ / s (s the softmax scale) within the fp32
//    bound, a bound the rounding alone exceeds (so a policy that scored with another query would
//    fail; at 64 the default pass, unrounded), and Reference given q itself within the derived
//    bound: a score moves by at most
//    (max |q_h s| / 254) (1 + 2^-14) sum |k| <= sqrt(dk) / 254 (1 + 2^-14) with q and the decoded
//    k in [-1, 1], and the output, a convex combination of values in [-1, 1], by exp(2 ds) - 1;
//  - SlimK2 on Hnd and XCache on Paged<16>: a converted layer, executor_tolerance with the
//    query's rounding (|q~_h - q_h| <= sqrt(dk) / 254 (1 + 2^-14) |q_h|), and outputs that differ
//    from the default AVX-512 kernels' over the same cache (the int8 pass ran: it is their only
//    difference).
// And DispatchCpuSimd<cpu::avx512vnni_scores> runs the policy exactly where the CPU has
// AVX512-VNNI. On a CPU without it the tests say so and pass nothing else (the kernels would
// fault); a build without AVX-512 has no policy to test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/exec/cpu/dispatch_cpu_simd.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
#include "support/executor_tolerance.hpp"
#include "support/mha_layer.hpp"

#if POLYATTN_HAS_INT8_SCORES

using namespace polyattn;
using namespace polyattn::testing;
using Policy = exec::CpuSimdInt8Scores;

// The keys the policy takes, as documented: every key but those of 1-4 whole vectors of 16.
static_assert(exec::cpu::int8_dot_key(17) && exec::cpu::int8_dot_key(20) && exec::cpu::int8_dot_key(72) && exec::cpu::int8_dot_key(120) &&
              exec::cpu::int8_dot_key(384) && !exec::cpu::int8_dot_key(16) && !exec::cpu::int8_dot_key(48) && !exec::cpu::int8_dot_key(64));

namespace {

bool cpu_has_policy() {
  if (exec::cpu::cpu_runs_avx512vnni()) return true;
  MESSAGE("this CPU has no AVX512-VNNI: the int8 scores policy is not run");
  return false;
}

/// |q~_h - q_h| / |q_h| at most, in 2-norm, for a head of dk elements: each element within half a
/// step of max |q_h| / 127 (and 127 times three fp32 roundings, 2^-15 of a step).
double query_roundoff(int dk) { return std::sqrt(double(dk)) / 254 * (1 + 0x1p-14); }

/// The query Reference is given so that it scores with the policy's: each head's scaled query
/// q s rounded as the policy rounds it (QueryCodes), over s.
RowMatrixXf policy_query(const RowMatrixXf& q, float s, int head_dim) {
  RowMatrixXf out(q.rows(), q.cols());
  for (Eigen::Index r = 0; r < q.rows(); ++r)
    for (Eigen::Index h = 0; h < q.cols() / head_dim; ++h) {
      float largest = 0;
      for (int c = 0; c < head_dim; ++c) largest = std::max(largest, std::abs(q(r, h * head_dim + c) * s));
      const auto codes = exec::cpu::QueryCodes::of(largest);
      for (int c = 0; c < head_dim; ++c) out(r, h * head_dim + c) = codes.rounded(q(r, h * head_dim + c) * s) / s;
    }
  return out;
}

template <class V, class L>
void check_kv_sharing_variant(int head_dim) {
  using T = std::int8_t;
  const AttentionShape shape{6, head_dim};
  const int kv_width = V::kv_heads(shape) * head_dim, q_width = shape.query_width();
  const float s = float(1.0 / std::sqrt(double(head_dim)));
  const bool rounds = exec::cpu::int8_dot_key(head_dim);
  const CacheConfig cache{.max_sequences = 3, .capacity = 310, .poison_unused = true};
  Attention<V, L, Policy, T> policy(shape, cache, {}, 2);
  // Two Reference layers over the same history (the same keys and values): one is given q' at
  // decode, the other q.
  Attention<V, L, exec::Reference, T> ref(shape, cache, {}, 2), ref_plain(shape, cache, {}, 2);
  std::mt19937 rng(11 + head_dim);
  // Tight: the fp32 bound; q' costs each query element 2 roundings (q~ / s, and s again inside).
  const double tight = fp32_attention_tolerance(head_dim, 303) + 2 * (2 * 0x1p-24 * std::sqrt(double(head_dim)));
  // Against q itself: ds <= (max |q s| / 254) (1 + 2^-14) sum |k| <= sqrt(dk) / 254 (1 + 2^-14),
  // q and the decoded k in [-1, 1] (a code times max |k| / 127: within 2^-23 of it).
  const double ds = std::sqrt(double(head_dim)) / 254 * (1 + 0x1p-14) * (1 + 0x1p-20);
  const double loose = fp32_attention_tolerance(head_dim, 303) + std::expm1(2 * ds);
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
    ref.decode(seqs, rounds ? policy_query(q, s, head_dim) : q, {k, v}, want);
    ref_plain.decode(seqs, q, {k, v}, plain);
    tight_diff = std::max(tight_diff, max_abs_diff(got, want));
    loose_diff = std::max(loose_diff, max_abs_diff(got, plain));
    moved = std::max(moved, max_abs_diff(want, plain));
  }
  CHECK(tight_diff <= tight);
  CHECK(loose_diff <= loose);
  // The rounding is there to see: the two References differ by more than the tight bound, so a
  // policy that did not round the query (or rounded it otherwise) would fail the tight check. At
  // 64 the policy keeps the default pass (int8_dot_key): no rounding, the fp32 bound.
  if (rounds)
    CHECK(moved > tight);
  else
    CHECK(moved == 0);
  MESSAGE(decltype(policy)::name(), ", head_dim ", head_dim, ": policy vs Reference(q') ", tight_diff, " (bound ", tight, "); vs Reference(q) ",
          loose_diff, " (bound ", loose, "; the rounding alone moves ", moved, ")");
}

template <class V, class L>
void check_converted_variant() {
  const AttentionShape shape{6, 20};  // input width 120 (a chunk of 64 and a tail of 56), heads of 20 (a tail)
  std::mt19937 rng(29);
  const LayerModel m = random_layer_model(shape, 10.0, rng);
  const Script s = Script::random(shape.input_width(), rng, 4, 0.0, 1);
  Attention<V, L, Policy, std::int8_t> policy(shape, script_cache(), params_for<V>(m), 2);
  Attention<V, L, exec::Reference, std::int8_t> ref(shape, script_cache(), params_for<V>(m), 2);
  // The key and value norms are measured on the unrounded rows, which int8 grows (norm_growth).
  const double growth = norm_growth<std::int8_t>(std::max(shape.input_width(), shape.query_width()));
  const int dk = std::is_same_v<V, XCache> ? shape.input_width() : shape.head_dim;  // what one head's query dots
  const double tol = executor_tolerance<V>(m, s, script_cache().capacity, query_roundoff(dk)) * growth * growth;
  // The default AVX-512 kernels over the same cache: the policy is those kernels but for the
  // int8 score pass, and both are deterministic (the same split over the threads, the same order
  // of sums), so their outputs differ only if that pass ran.
  Attention<V, L, exec::BasicCpuSimd<xsimd::avx512bw>, std::int8_t> fp32(shape, script_cache(), params_for<V>(m), 2);
  INFO(decltype(policy)::name());
  const RowMatrixXf got = run_script(policy, m, s);
  const double diff = max_abs_diff(got, run_script(ref, m, s)), moved = max_abs_diff(got, run_script(fp32, m, s));
  CHECK(diff <= tol);
  CHECK(moved > 0);
  MESSAGE(decltype(policy)::name(), ": vs Reference ", diff, " (bound ", tol, "); differs from the default kernels by ", moved);
}

}  // namespace

TEST_CASE_TEMPLATE("int8 scores: Mha, Gqa and Mqa decode as Reference with the rounded query, and within the derived bound of the unrounded one",
                   C, Combo<Mha, Hnd, Policy, std::int8_t>, Combo<Gqa<2>, Paged<16>, Policy, std::int8_t>, Combo<Mqa, Nhd, Policy, std::int8_t>) {
  if (!cpu_has_policy()) return;
  for (int head_dim : {17, 64, 72}) check_kv_sharing_variant<typename C::variant, typename C::layout>(head_dim);
}

TEST_CASE_TEMPLATE("int8 scores: SlimK2 and XCache within executor_tolerance with the query's rounding", C,
                   Combo<SlimK2, Hnd, Policy, std::int8_t>, Combo<XCache, Paged<16>, Policy, std::int8_t>) {
  if (!cpu_has_policy()) return;
  check_converted_variant<typename C::variant, typename C::layout>();
}

TEST_CASE("int8 scores: DispatchCpuSimd runs the policy exactly where the CPU has AVX512-VNNI") {
  const exec::DispatchCpuSimd<exec::cpu::avx512vnni_scores> dispatch(2);
  CHECK(dispatch.uses_arch() == (exec::cpu::cpu_runs<xsimd::avx512bw>() && exec::cpu::cpu_runs_avx512vnni()));
  CHECK(exec::DispatchCpuSimd<exec::cpu::avx512vnni_scores>::name() == std::string("cpu/avx512bw+vnni_scores|") + xsimd::default_arch::name());
  CHECK(Policy::name() == "cpu/avx512bw+vnni_scores");
}

#else
TEST_CASE("int8 scores: not built (the policy needs a build for AVX-512)") { MESSAGE("this build has no AVX-512: nothing to test"); }
#endif
