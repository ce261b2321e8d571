// exec::DispatchCpuSimd (exec/cpu/dispatch_cpu_simd.hpp) in the program a user would ship: this
// file is built for x86-64-v3 (AVX2, no -march=native) and the AVX-512 kernels come from a shared
// library built for x86-64-v4 (support/dispatch_kernels_avx512.cpp). On a CPU with AVX-512 the
// executor runs those, elsewhere the AVX2 kernels compiled here; refused, it runs the AVX2 ones
// anywhere. Either way Mha, Gqa<4> and Mqa on every layout meet the dense oracle (the equivalence
// scenarios), and the 16-bit caches meet it over their rounded rows.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN  // doctest's main compiled here too: nothing in this program is built for more than x86-64-v3
#include <doctest/doctest.h>

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
