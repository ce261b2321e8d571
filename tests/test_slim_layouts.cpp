// The new variants (SlimK options 1 and 2, with and without RoPE, and XCache) through the CpuSimd
// executor over every cache layout, against the Reference executor on Nhd. NaN-poisoned caches.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/dense_oracle.hpp"
#include "support/executor_tolerance.hpp"
#include "support/mha_layer.hpp"
#include "support/sanitizers.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {
template <class V, class E, class L>
RowMatrixXf run_variant(const LayerModel& m, const Script& s) {
  Attention<V, L, E> attn(m.shape, script_cache(), params_for<V>(m), 2);
  return run_script(attn, m, s);
}
}  // namespace

// CpuSimd over every layout against the Reference executor, for each new variant.
using NewVariants = std::tuple<SlimK1, SlimK2, SlimK<slim::ValuesFromKeys, slim::Rope>, SlimK<slim::WeightedKeys, slim::Rope>, XCache>;

TEST_CASE_TEMPLATE_DEFINE("CpuSimd matches Reference over Nhd, Hnd and Paged layouts", V, cpu_vs_reference) {
  // Heads of 16 and 20 (widths that are not a multiple of 16), and for SlimK2 heads of 64
  // (Whisper tiny's: on AVX2 each head's slice takes MHA's lone-key score pass, lone_head_slices),
  // not under AddressSanitizer, where its 384-wide layers cost the most (test_cpu_elements).
  std::vector<int> head_dims{16, 20};
  if (std::is_same_v<V, SlimK2> && !kUnderAddressSanitizer) head_dims.push_back(64);
  for (int head_dim : head_dims) {
    const AttentionShape shape{6, head_dim};
    std::mt19937 rng(17 + head_dim);
    const bool rope = V::name().find("rope") != std::string::npos;
    const LayerModel m = random_layer_model(shape, 10.0, rng, rope);
    const Script s = Script::random(shape.input_width(), rng, 4, rope ? 500.0 : 0.0);
    const RowMatrixXf ref = run_variant<V, exec::Reference, Nhd>(m, s);
    // The executors differ by the fp32 error of the attend and of the maps after it, derived from
    // the norms of the script's own queries, keys and maps (executor_tolerance).
    const double tol = executor_tolerance<V>(m, s, script_cache().capacity);
    INFO(V::name(), " head_dim ", head_dim, " tolerance ", tol);
    CHECK(max_abs_diff(run_variant<V, exec::CpuSimd, Nhd>(m, s), ref) <= tol);
    CHECK(max_abs_diff(run_variant<V, exec::CpuSimd, Hnd>(m, s), ref) <= tol);
    CHECK(max_abs_diff(run_variant<V, exec::CpuSimd, Paged<16>>(m, s), ref) <= tol);
    CHECK(max_abs_diff(run_variant<V, exec::CpuSimd, Paged<7>>(m, s), ref) <= tol);
    CHECK(max_abs_diff(run_variant<V, exec::Reference, Paged<7>>(m, s), ref) <= tol);
  }
}
TEST_CASE_TEMPLATE_APPLY(cpu_vs_reference, NewVariants);

