// Mla (both key-part forms, and full compression) through every layout and executor: the absorbed
// decode equals the expanded, non-absorbed computation done in double; CpuSimd equals Reference.
// Unused cache capacity is NaN, so any read past a sequence's end shows.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/combos.hpp"
#include "support/latent_oracle.hpp"
#include "support/layout_element.hpp"
#include "support/latent_scenarios.hpp"
#include "support/zero_row_calls.hpp"

using namespace polyattn;
using namespace polyattn::testing;

using MlaRope = Mla<24, 8, MlaKeyPart::decoupled_rope>;  // DeepSeek form
using MlaKeep = Mla<20, 4, MlaKeyPart::preserved>;       // Whisper-MLA form
using MlaFull = Mla<17, 0, MlaKeyPart::preserved>;       // full compression, odd rank (SIMD tails)

static_assert(Attention<Mla<96, 4, MlaKeyPart::preserved>, Nhd, exec::CpuSimd>::cache_bytes_per_token({12, 64}) == (96 + 12 * 4) * 4,
              "Whisper-MLA small: latent 96 + 48 kept key dims per token");
static_assert(Attention<Mla<256, 32>, Paged<16>, exec::CpuSimd>::cache_bytes_per_token({8, 64}) == (256 + 32) * 4,
              "MTLA paper's MLA: r = 4 d_h, RoPE d_h / 2");

namespace {

template <class V>
constexpr AttentionShape test_shape() {
  if constexpr (std::is_same_v<V, MlaRope>) return {4, 16};
  if constexpr (std::is_same_v<V, MlaKeep>) return {4, 12};
  return {3, 10};
}

}  // namespace

TEST_CASE_TEMPLATE("Mla absorbed prefill and batched decode equal the expanded computation", C,
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MLA_COMBOS, MlaRope), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MLA_COMBOS, MlaKeep),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MLA_COMBOS, MlaFull)) {
  mla_prefill_then_batched_decode_scenario<typename C::type>(test_shape<typename C::type::variant_type>());
}

TEST_CASE_TEMPLATE("Mla over a long sequence split across threads equals the expanded computation", L, Nhd, Hnd, Paged<16>) {
  using V = MlaKeep;
  using A = Attention<V, L, exec::CpuSimd>;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(77);
  const auto params = random_mla_params<V>(s, rng, true);
  A attn(s, {.max_sequences = 1, .capacity = 1100, .poison_unused = true}, params, 2);
  const int seq = attn.open_sequence();
  LatentHistory h;
  h.latent.resize(0, V::rank);
  h.part.resize(0, V::key_part_width(s));
  for (int chunk : {300, 1, 699}) {
    RowMatrixXf q = random_matrix(chunk, V::query_width(s), rng), lat = random_matrix(chunk, V::rank, rng);
    RowMatrixXf part = random_matrix(chunk, V::key_part_width(s), rng), out(chunk, V::output_width(s));
    const int first = attn.length(seq);
    attn.prefill(seq, q, {lat, part}, Mask::causal, out);
    h.add(lat, part);
    std::vector<int> visible;
    for (int t = 0; t < chunk; ++t) visible.push_back(first + t + 1);
    CHECK(max_abs_diff(out, expanded_mla_attention<V>(s, params, q, h, visible)) <= mla_tolerance<V>(s, int(h.latent.rows())));
  }
  const int one[] = {seq};
  RowMatrixXf q = random_matrix(1, V::query_width(s), rng), lat = random_matrix(1, V::rank, rng);
  RowMatrixXf part = random_matrix(1, V::key_part_width(s), rng), out(1, V::output_width(s));
  attn.decode(one, q, {lat, part}, out);
  h.add(lat, part);
  CHECK(max_abs_diff(out, expanded_mla_attention<V>(s, params, q, h, {})) <= mla_tolerance<V>(s, int(h.latent.rows())));
}

TEST_CASE_TEMPLATE("Mla: CpuSimd equals Reference on the same cache (float, half and bfloat16 rows)", C, LayoutElement<Nhd>,
                   LayoutElement<Hnd>, LayoutElement<Paged<16>>, LayoutElement<Paged<5>>, LayoutElement<Nhd, Eigen::half>,
                   LayoutElement<Paged<16>, Eigen::bfloat16>) {
  // Both executors read the same rounded rows, so a 16-bit cache changes the inputs, not the error.
  using V = MlaRope;
  using L = typename C::layout;
  using T = typename C::element;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(11);
  const auto params = random_mla_params<V>(s, rng, false);
  Attention<V, L, exec::Reference, T> ref(s, {.max_sequences = 2, .capacity = 64, .poison_unused = true}, params);
  Attention<V, L, exec::CpuSimd, T> cpu(s, {.max_sequences = 2, .capacity = 64, .poison_unused = true}, params, 2);
  const int a = ref.open_sequence(), b = ref.open_sequence();
  REQUIRE(cpu.open_sequence() == a);
  REQUIRE(cpu.open_sequence() == b);
  for (int seq : {a, b}) {
    const int n = seq == a ? 50 : 9;
    RowMatrixXf q = random_matrix(n, V::query_width(s), rng), lat = random_matrix(n, V::rank, rng);
    RowMatrixXf part = random_matrix(n, V::key_part_width(s), rng), out_ref(n, V::output_width(s)), out_cpu(n, V::output_width(s));
    ref.prefill(seq, q, {lat, part}, Mask::full, out_ref);
    cpu.prefill(seq, q, {lat, part}, Mask::full, out_cpu);
    CHECK(max_abs_diff(out_ref, out_cpu) <= 2 * mla_tolerance<V>(s, n));
  }
  const int both[] = {b, a};
  RowMatrixXf q = random_matrix(2, V::query_width(s), rng), out_ref(2, V::output_width(s)), out_cpu(2, V::output_width(s));
  ref.attend(both, q, out_ref);
  cpu.attend(both, q, out_cpu);
  CHECK(max_abs_diff(out_ref, out_cpu) <= 2 * mla_tolerance<V>(s, 50));
}

TEST_CASE("Mla::expand is the non-absorbed key/value layout, and a scale override reaches the spec") {
  for (bool preserved : {false, true}) {
    std::mt19937 rng(3);
    auto run = [&]<class V>(std::type_identity<V>) {
      const AttentionShape s = test_shape<V>();
      auto params = random_mla_params<V>(s, rng, true);
      RowMatrixXf lat = random_matrix(6, V::rank, rng), part = random_matrix(6, V::key_part_width(s), rng);
      const auto e = V::expand(s, params, {lat, part});
      const RowMatrixXd k = expand_keys(lat, part, params.w_uk, s.n_heads, V::key_part_dim, preserved);
      RowMatrixXd v = lat.cast<double>() * params.w_uv.template cast<double>();
      v.rowwise() += params.value_bias.template cast<double>();
      CHECK(max_abs_diff(e.k, k) <= 1e-5);
      CHECK(max_abs_diff(e.v, v) <= 1e-5);
      CHECK(V::attend_spec(s, params).scale == doctest::Approx(1.0 / std::sqrt(double(V::query_head_dim(s)))));
      params.scale = 0.25f;
      CHECK(V::attend_spec(s, params).scale == 0.25f);
    };
    if (preserved)
      run(std::type_identity<MlaKeep>{});
    else
      run(std::type_identity<MlaRope>{});
  }
}

TEST_CASE_TEMPLATE("Mla: calls with zero rows change nothing", E, exec::Reference, exec::CpuSimd) {
  using V = MlaKeep;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(78);
  Attention<V, Hnd, E> attn(s, {.max_sequences = 2, .capacity = 8, .poison_unused = true}, random_mla_params<V>(s, rng, true), 2);
  const int kw = V::key_part_width(s);
  const RowMatrixXf q = random_matrix(3, V::query_width(s), rng), lat = random_matrix(3, V::rank, rng), part = random_matrix(3, kw, rng);
  const RowMatrixXf no_q(0, q.cols()), no_lat(0, V::rank), no_part(0, kw);
  check_zero_row_calls(attn, q, {lat, part}, no_q, {no_lat, no_part});
}
