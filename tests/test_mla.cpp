// Mla (both key-part forms, and full compression) through every layout and executor: the absorbed
// decode equals the expanded, non-absorbed computation done in double; CpuSimd equals Reference.
// Unused cache capacity is NaN, so any read past a sequence's end shows.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/latent_oracle.hpp"

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

template <class V>
typename V::Params random_params(AttentionShape s, std::mt19937& rng, bool with_bias) {
  typename V::Params p;
  const int nope = V::nope_dim(s);
  p.w_uk = bounded_weight(V::rank, s.n_heads * nope, nope, rng);
  p.w_uv = bounded_weight(V::rank, s.n_heads * s.head_dim, V::rank, rng);
  if (with_bias) p.value_bias = random_matrix(1, s.n_heads * s.head_dim, rng, 0.5f);
  return p;
}

/// One sequence's cached rows, kept densely for the oracle.
struct History {
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
RowMatrixXd expanded_attention(AttentionShape s, const typename V::Params& p, const RowMatrixXf& q, const History& h,
                               const std::vector<int>& visible) {
  const RowMatrixXd k = expand_keys(h.latent, h.part, p.w_uk, s.n_heads, V::key_part_dim, V::key_part == MlaKeyPart::preserved);
  RowMatrixXd v = h.latent.cast<double>() * p.w_uv.template cast<double>();
  if (p.value_bias.size() > 0) v.rowwise() += p.value_bias.template cast<double>();
  return dense_attention_f64(q.cast<double>(), k, v, s.n_heads, 1.0 / std::sqrt(double(V::query_head_dim(s))), visible);
}

template <class V>
double tolerance(AttentionShape s, int tokens) {
  return absorbed_tolerance(V::Absorb::row_width(s), V::nope_dim(s), V::rank, tokens, 1.0 / std::sqrt(double(V::query_head_dim(s))));
}

template <class A>
void check_prefill_then_batched_decode() {
  using V = typename A::variant_type;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(4321 + V::rank);
  const auto params = random_params<V>(s, rng, V::key_part == MlaKeyPart::preserved);
  A attn(s, {.max_sequences = 3, .capacity = 40, .poison_unused = true}, params, 2);
  const int qw = V::query_width(s), ow = V::output_width(s), kw = V::key_part_width(s);

  std::vector<History> hist(3);
  const int prefill_len[3] = {1, 13, 29};
  for (int i = 0; i < 3; ++i) {
    History& h = hist[std::size_t(i)];
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
    CHECK(max_abs_diff(out, expanded_attention<V>(s, params, q, h, visible)) <= tolerance<V>(s, n));
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
      History& h = hist[std::size_t(order[std::size_t(r)])];
      h.add(lat.row(r), part.row(r));
      INFO(A::name(), " step ", step, " row ", r, " length ", h.latent.rows());
      CHECK(max_abs_diff(out.row(r), expanded_attention<V>(s, params, q.row(r), h, {})) <= tolerance<V>(s, int(h.latent.rows())));
    }
  }
}

template <class V, class L, class E>
struct Combo {
  using type = Attention<V, L, E, float>;
};

}  // namespace

#define POLYATTN_MLA_COMBOS_FOR(V)                                                                                   \
  Combo<V, Nhd, exec::Reference>, Combo<V, Hnd, exec::Reference>, Combo<V, Paged<16>, exec::Reference>,           \
      Combo<V, Paged<7>, exec::Reference>, Combo<V, Nhd, exec::CpuSimd>, Combo<V, Hnd, exec::CpuSimd>,             \
      Combo<V, Paged<16>, exec::CpuSimd>, Combo<V, Paged<7>, exec::CpuSimd>

TEST_CASE_TEMPLATE("Mla absorbed prefill and batched decode equal the expanded computation", C, POLYATTN_MLA_COMBOS_FOR(MlaRope),
                   POLYATTN_MLA_COMBOS_FOR(MlaKeep), POLYATTN_MLA_COMBOS_FOR(MlaFull)) {
  check_prefill_then_batched_decode<typename C::type>();
}

TEST_CASE_TEMPLATE("Mla over a long sequence split across threads equals the expanded computation", L, Nhd, Hnd, Paged<16>) {
  using V = MlaKeep;
  using A = Attention<V, L, exec::CpuSimd>;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(77);
  const auto params = random_params<V>(s, rng, true);
  A attn(s, {.max_sequences = 1, .capacity = 1100, .poison_unused = true}, params, 2);
  const int seq = attn.open_sequence();
  History h;
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
    CHECK(max_abs_diff(out, expanded_attention<V>(s, params, q, h, visible)) <= tolerance<V>(s, int(h.latent.rows())));
  }
  const int one[] = {seq};
  RowMatrixXf q = random_matrix(1, V::query_width(s), rng), lat = random_matrix(1, V::rank, rng);
  RowMatrixXf part = random_matrix(1, V::key_part_width(s), rng), out(1, V::output_width(s));
  attn.decode(one, q, {lat, part}, out);
  h.add(lat, part);
  CHECK(max_abs_diff(out, expanded_attention<V>(s, params, q, h, {})) <= tolerance<V>(s, int(h.latent.rows())));
}

TEST_CASE_TEMPLATE("Mla: CpuSimd equals Reference on the same cache", L, Nhd, Hnd, Paged<16>, Paged<5>) {
  using V = MlaRope;
  const AttentionShape s = test_shape<V>();
  std::mt19937 rng(11);
  const auto params = random_params<V>(s, rng, false);
  Attention<V, L, exec::Reference> ref(s, {.max_sequences = 2, .capacity = 64, .poison_unused = true}, params);
  Attention<V, L, exec::CpuSimd> cpu(s, {.max_sequences = 2, .capacity = 64, .poison_unused = true}, params, 2);
  const int a = ref.open_sequence(), b = ref.open_sequence();
  REQUIRE(cpu.open_sequence() == a);
  REQUIRE(cpu.open_sequence() == b);
  for (int seq : {a, b}) {
    const int n = seq == a ? 50 : 9;
    RowMatrixXf q = random_matrix(n, V::query_width(s), rng), lat = random_matrix(n, V::rank, rng);
    RowMatrixXf part = random_matrix(n, V::key_part_width(s), rng), out_ref(n, V::output_width(s)), out_cpu(n, V::output_width(s));
    ref.prefill(seq, q, {lat, part}, Mask::full, out_ref);
    cpu.prefill(seq, q, {lat, part}, Mask::full, out_cpu);
    CHECK(max_abs_diff(out_ref, out_cpu) <= 2 * tolerance<V>(s, n));
  }
  const int both[] = {b, a};
  RowMatrixXf q = random_matrix(2, V::query_width(s), rng), out_ref(2, V::output_width(s)), out_cpu(2, V::output_width(s));
  ref.attend(both, q, out_ref);
  cpu.attend(both, q, out_cpu);
  CHECK(max_abs_diff(out_ref, out_cpu) <= 2 * tolerance<V>(s, 50));
}

TEST_CASE("Mla::expand is the non-absorbed key/value layout, and a scale override reaches the spec") {
  for (bool preserved : {false, true}) {
    std::mt19937 rng(3);
    auto run = [&]<class V>(std::type_identity<V>) {
      const AttentionShape s = test_shape<V>();
      auto params = random_params<V>(s, rng, true);
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
