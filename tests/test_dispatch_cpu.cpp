// exec::DispatchCpuSimd (exec/cpu/dispatch_cpu_simd.hpp) in the program a user would ship: this
// file is built for x86-64-v3 (AVX2, no -march=native) and the AVX-512 kernels come from a shared
// library built for x86-64-v4 (support/dispatch_kernels_avx512.cpp). On a CPU with AVX-512 the
// executor runs those, elsewhere the AVX2 kernels compiled here; refused, it runs the AVX2 ones
// anywhere. Either way Mha, Gqa<4> and Mqa on every layout meet the dense oracle (the equivalence
// scenarios), and the 16-bit caches meet it over their rounded rows. The bfloat16 scores policy
// is named here too, and runs exactly where the CPU has AVX512-BF16.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN  // doctest's main compiled here too: nothing in this program is built for more than x86-64-v3
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>

#include "support/dispatch_layers.hpp"
#include "support/combos.hpp"
#include "support/equivalence_scenarios.hpp"
#include "support/rounded_cache.hpp"

namespace dispatch = polyattn::testing::dispatch;

static_assert(std::is_same_v<xsimd::default_arch, xsimd::fma3<xsimd::avx2>>, "test_dispatch_cpu is built for x86-64-v3 (tests/CMakeLists.txt)");

/// The same Attention type on the fallback kernels.
template <class A>
using OnFallback = polyattn::Attention<typename A::variant_type, typename A::layout_type, dispatch::FallbackExecutor,
                                       typename A::value_type>;

TEST_CASE("dispatch: the AVX-512 kernels where the CPU runs x86-64-v4, the AVX2 kernels elsewhere or when refused") {
  const bool v4 = polyattn::exec::cpu::cpu_runs<xsimd::avx512bw>();
  const std::string ran = std::string("this CPU ") + (v4 ? "runs" : "does not run") +
                          " x86-64-v4: the dispatched cases below ran the " + (v4 ? "AVX-512" : "AVX2") + " kernels";
  MESSAGE(ran);
  CHECK(polyattn::exec::cpu::cpu_runs<xsimd::fma3<xsimd::avx2>>());  // this program runs, so the CPU has x86-64-v3
  const dispatch::Executor chosen(2), refused(2, false);
  CHECK(chosen.uses_arch() == v4);
  CHECK(chosen.kernels() == (v4 ? "avx512bw" : "fma3+avx2"));
  CHECK(!refused.uses_arch());
  CHECK(refused.kernels() == "fma3+avx2");
  CHECK(dispatch::Executor::name() == "cpu/avx512bw|fma3+avx2");
}

/// Mha, Gqa<4>, Mqa of the equivalence family (support/combos.hpp) on every layout, on executor E:
/// the dispatched kernels are compiled twice (AVX-512 and AVX2), so three of its five variants.
#define POLYATTN_DISPATCH_FLOAT_COMBOS(E)                                                                            \
  POLYATTN_LAYOUT_COMBOS(polyattn::Mha, E), POLYATTN_LAYOUT_COMBOS(polyattn::Gqa<4>, E),                              \
      POLYATTN_LAYOUT_COMBOS(polyattn::Mqa, E)

TEST_CASE_TEMPLATE("dispatch: the equivalence scenarios match the dense oracle", C, POLYATTN_DISPATCH_FLOAT_COMBOS(dispatch::Executor),
                   POLYATTN_DISPATCH_FLOAT_COMBOS(dispatch::FallbackExecutor)) {
  polyattn::testing::run_equivalence_scenarios<typename C::type>();
}

/// A 16-bit cache through prefill and decode against the dense oracle over the rows it holds
/// (rounded once to T): the same bound as a float cache.
template <class A>
void check_16_bit_cache() {
  using T = typename A::value_type;
  const polyattn::AttentionShape shape{8, 64};
  const int kv = A::variant_type::kv_heads(shape) * shape.head_dim, n = 300;
  std::mt19937 rng(7);
  const polyattn::RowMatrixXf q = polyattn::testing::random_matrix(n, 8 * 64, rng), k = polyattn::testing::random_matrix(n, kv, rng),
                              v = polyattn::testing::random_matrix(n, kv, rng);
  A attn(shape, {.max_sequences = 1, .capacity = n + 5, .poison_unused = true}, {}, 2);
  const polyattn::RowMatrixXf y = polyattn::testing::prefill_then_decode(attn, q, k, v);
  const polyattn::RowMatrixXf expected = polyattn::testing::dense_attention(
      q, polyattn::testing::rounded<T>(k), polyattn::testing::rounded<T>(v), 8, 8 / A::variant_type::kv_heads(shape), true, 0);
  INFO(A::name(), " with ", sizeof(T) * 8, "-bit elements");
  CHECK(polyattn::testing::max_abs_diff(y, expected) <= polyattn::testing::fp32_attention_tolerance(64, n));
}

TEST_CASE_TEMPLATE("dispatch: 16-bit caches match the dense oracle over their rounded rows", A, dispatch::MhaHndHalf, dispatch::Gqa4NhdBf16,
                   OnFallback<dispatch::MhaHndHalf>, OnFallback<dispatch::Gqa4NhdBf16>) {
  check_16_bit_cache<A>();
}

/// The bfloat16 scores policy named by this x86-64-v3 program (DispatchCpuSimd<cpu::
/// avx512bf16_scores>, its kernels in the x86-64-v4 library): where the CPU has AVX512-BF16 it
/// runs them and its decode rows meet the dense oracle given the query the policy scores with,
/// q' = bfloat16(q s) / s, within the fp32 bound (tests/test_bf16_scores.cpp derives it), a
/// bound the rounding alone exceeds; elsewhere it runs the AVX2 kernels, fp32, within the fp32
/// bound of q itself. Head dim 72: a key the policy scores by vdpbf16ps (bf16_dot_key).
template <class A>
void check_named_policy() {
  using T = typename A::value_type;
  const polyattn::AttentionShape shape{8, 72};
  const int group = 8 / A::variant_type::kv_heads(shape), kv = A::variant_type::kv_heads(shape) * shape.head_dim, n = 300, first_decoded = 9;
  std::mt19937 rng(11);
  const polyattn::RowMatrixXf q = polyattn::testing::random_matrix(n, 8 * 72, rng), k = polyattn::testing::random_matrix(n, kv, rng),
                              v = polyattn::testing::random_matrix(n, kv, rng);
  A attn(shape, {.max_sequences = 1, .capacity = n + 5, .poison_unused = true}, {}, 2);
  const bool policy = polyattn::exec::cpu::cpu_runs<xsimd::avx512bw>() && polyattn::exec::cpu::cpu_runs_avx512bf16();
  CHECK(attn.executor().uses_arch() == policy);
  CHECK(attn.executor().kernels() == (policy ? "avx512bw+bf16_scores" : "fma3+avx2"));
  const polyattn::RowMatrixXf y = polyattn::testing::prefill_then_decode(attn, q, k, v);
  const polyattn::RowMatrixXf kr = polyattn::testing::rounded<T>(k), vr = polyattn::testing::rounded<T>(v);
  const polyattn::RowMatrixXf plain = polyattn::testing::dense_attention(q, kr, vr, 8, group, true, 0);
  const float s = float(1.0 / std::sqrt(72.0));
  const polyattn::RowMatrixXf q_policy = q.unaryExpr([s](float x) { return polyattn::exec::cpu::round_to_bfloat16(x * s) / s; });
  const polyattn::RowMatrixXf rounded_query = polyattn::testing::dense_attention(q_policy, kr, vr, 8, group, true, 0);
  const double fp32 = polyattn::testing::fp32_attention_tolerance(72, n);
  const double tight = fp32 + 2 * (2 * 0x1p-24 * std::sqrt(72.0));  // q' costs two roundings more
  const auto decoded = [&](const polyattn::RowMatrixXf& m) { return m.bottomRows(n - first_decoded); };
  INFO(A::name(), " on ", attn.executor().kernels());
  if (policy) {
    CHECK(polyattn::testing::max_abs_diff(decoded(y), decoded(rounded_query)) <= tight);
    CHECK(polyattn::testing::max_abs_diff(decoded(plain), decoded(rounded_query)) > tight);  // the rounding is there to see
  } else {
    CHECK(polyattn::testing::max_abs_diff(y, plain) <= fp32);
  }
}

TEST_CASE_TEMPLATE("dispatch: the bfloat16 scores policy, named by an x86-64-v3 program, runs where the CPU has AVX512-BF16", A,
                   dispatch::MhaHndBf16Scores, dispatch::Gqa2Paged16Bf16Scores) {
  check_named_policy<A>();
}
