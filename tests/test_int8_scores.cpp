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
#include "support/query_rounding_scenarios.hpp"

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

}  // namespace

TEST_CASE_TEMPLATE("int8 scores: Mha, Gqa and Mqa decode as Reference with the rounded query, and within the derived bound of the unrounded one",
                   C, Combo<Mha, Hnd, Policy, std::int8_t>, Combo<Gqa<2>, Paged<16>, Policy, std::int8_t>, Combo<Mqa, Nhd, Policy, std::int8_t>) {
  if (!cpu_has_policy()) return;
  for (int head_dim : {17, 64, 72}) {
    // Against q itself: ds <= (max |q s| / 254) (1 + 2^-14) sum |k| <= sqrt(dk) / 254 (1 + 2^-14),
    // q and the decoded k in [-1, 1] (a code times max |k| / 127: within 2^-23 of it).
    const auto rounding = query_rounding([head_dim](const RowMatrixXf& q, float s) { return policy_query(q, s, head_dim); },
                                         exec::cpu::int8_dot_key(head_dim), std::sqrt(double(head_dim)) / 254 * (1 + 0x1p-14) * (1 + 0x1p-20));
    check_kv_sharing_under_policy<typename C::variant, typename C::layout, Policy, std::int8_t>(head_dim, rounding, 11 + head_dim);
  }
}

TEST_CASE_TEMPLATE("int8 scores: SlimK2 and XCache within executor_tolerance with the query's rounding", C,
                   Combo<SlimK2, Hnd, Policy, std::int8_t>, Combo<XCache, Paged<16>, Policy, std::int8_t>) {
  if (!cpu_has_policy()) return;
  using V = typename C::variant;
  const int dk = std::is_same_v<V, XCache> ? 120 : 20;  // what one head's query dots: the input (120), or a head (20)
  check_converted_under_policy<V, typename C::layout, Policy, exec::BasicCpuSimd<xsimd::avx512bw>, std::int8_t>(query_roundoff(dk), 29);
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
