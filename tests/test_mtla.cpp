// Mtla: incremental decode (the cache merges Stride tokens per row) equals the parallel path
// with the stride-aware causal mask, for Stride 1..4 and lengths that are and are not multiples
// of the stride; in double (the algorithm) and in fp32 through every layout and executor.
#include <doctest/doctest.h>

#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/check_throws.hpp"
#include "support/combos.hpp"
#include "support/latent_oracle.hpp"
#include "support/layout_element.hpp"
#include "support/latent_scenarios.hpp"
#include "support/zero_row_calls.hpp"

using namespace polyattn;
using namespace polyattn::testing;

static_assert(Attention<Mtla<256, 2, 32>, Nhd, exec::CpuSimd>::cache_bytes_per_token({8, 64}) == 144 * 4,
              "MTLA paper: 9 d_h / (2 s) elements per token, 2.5 d_h at s = 2... per layer and d_h = 64: 288 / 2");
static_assert(Attention<Mtla<256, 3, 32>, Nhd, exec::CpuSimd>::cache_bytes_per_row({8, 64}) == 288 * 4);

namespace {

constexpr AttentionShape kShape{3, 8};  // query head 8 + 4 RoPE dims; Rank 16, hyper-network 4 wide

/// A dense slot cache in double for Mtla::write_rows (one sequence, one head).
struct SlotStore {
  int width = 0;
  std::vector<double> data;
  double* row(int /*tensor*/, int /*seq*/, int slot, int /*head*/) {
    if (std::size_t(slot + 1) * std::size_t(width) > data.size()) data.resize(std::size_t(slot + 1) * std::size_t(width), NAN);
    return data.data() + std::ptrdiff_t(slot) * width;
  }
};

/// The incremental algorithm in double: after token i is merged, query i attends the slots
/// through the expanded (non-absorbed) keys and values. Returns (T, n_heads * head_dim).
template <class V>
RowMatrixXd incremental_f64(AttentionShape s, const typename V::Params& p, const RowMatrixXf& q, const RowMatrixXf& latent,
                            const RowMatrixXf& rope_key) {
  SlotStore store{V::rank + V::rope_dim, {}};
  std::vector<double> open_row(V::rank);
  const int T = int(q.rows());
  RowMatrixXd out(T, s.n_heads * s.head_dim);
  const double scale = 1.0 / std::sqrt(double(s.head_dim + V::rope_dim));
  for (int i = 0; i < T; ++i) {
    V::write_rows(store, 0, i, s, p, {latent, rope_key}, i, 1, open_row.data());
    const int slots = i / V::stride + 1;
    const Eigen::Map<const RowMatrixXd> rows(store.data.data(), slots, store.width);
    RowMatrixXd k(slots, s.n_heads * (s.head_dim + V::rope_dim));
    for (int h = 0; h < s.n_heads; ++h) {
      k.middleCols(h * (s.head_dim + V::rope_dim), s.head_dim) =
          rows.leftCols(V::rank) * p.w_uk.middleCols(h * s.head_dim, s.head_dim).template cast<double>();
      k.middleCols(h * (s.head_dim + V::rope_dim) + s.head_dim, V::rope_dim) = rows.rightCols(V::rope_dim);
    }
    const RowMatrixXd v = rows.leftCols(V::rank) * p.w_uv.template cast<double>();
    out.row(i) = dense_attention_f64(q.row(i).cast<double>(), k, v, s.n_heads, scale);
  }
  return out;
}

template <int S>
using MtlaS = Mtla<16, S, 4>;

}  // namespace

TEST_CASE_TEMPLATE("Mtla in double: incremental merging equals the parallel stride-masked path", V, MtlaS<1>, MtlaS<2>, MtlaS<3>, MtlaS<4>,
                   Mtla<36, 3, 6>) {
  std::mt19937 rng(100 + V::stride);
  const auto p = random_mtla_params<V>(kShape, rng);
  for (int T : {1, V::stride, 3 * V::stride, 3 * V::stride + 1, 13}) {
    INFO(V::name(), " T = ", T);
    const RowMatrixXf q = random_matrix(T, V::query_width(kShape), rng), lat = random_matrix(T, V::rank, rng);
    const RowMatrixXf kr = random_matrix(T, V::rope_dim, rng);
    const RowMatrixXd parallel = mtla_parallel_oracle<V>(kShape.n_heads, kShape.head_dim, p, q, lat, kr);
    const RowMatrixXd incremental = incremental_f64<V>(kShape, p, q, lat, kr);
    CHECK((parallel - incremental).cwiseAbs().maxCoeff() <= 1e-12);
  }
}

/// The parallel form on executor E at T tokens against the paper's, in double, within the
/// absorbed fp32 path's error for latent entries up to M = max(1, max |C'|) (absorbed_tolerance;
/// M from the oracle's merge, not from the code under test).
template <class V, class E>
void check_parallel_form(E& executor, AttentionShape s, int T, std::mt19937& rng) {
  const auto p = random_mtla_params<V>(s, rng);
  const RowMatrixXf q = random_matrix(T, V::query_width(s), rng), lat = random_matrix(T, V::rank, rng);
  const RowMatrixXf kr = random_matrix(T, V::rope_dim, rng);
  RowMatrixXf out = RowMatrixXf::Constant(T, V::output_width(s), NAN);
  mtla_parallel_attention<V>(executor, s, p, q, {lat, kr}, out);
  double merged_max = 0;
  const RowMatrixXd expected = mtla_parallel_oracle<V>(s.n_heads, s.head_dim, p, q, lat, kr, &merged_max);
  const double scale = 1.0 / std::sqrt(double(s.head_dim + V::rope_dim));
  INFO(V::name(), " T = ", T, " heads ", s.n_heads, " x ", s.head_dim, ", max |C'| ", merged_max);
  CHECK(max_abs_diff(out, expected) <=
        absorbed_tolerance(V::rank + V::rope_dim, s.head_dim, V::rank, T, scale, std::max(1.0, merged_max)));
}

TEST_CASE_TEMPLATE("Mtla's parallel form on an executor equals the paper's at 1 to 257 tokens", V, MtlaS<1>, MtlaS<2>, MtlaS<3>,
                   MtlaS<4>, Mtla<36, 3, 6>) {
  std::mt19937 rng(300 + V::stride);
  exec::Reference reference;
  exec::CpuSimd cpu(2);
  for (int T : {1, 2, 63, 64, 65, 257}) {
    check_parallel_form<V>(reference, kShape, T, rng);
    check_parallel_form<V>(cpu, kShape, T, rng);
  }
  check_parallel_form<V>(cpu, AttentionShape{8, 64}, 200, rng);  // 8 query heads per key row, absorbed from heads of 64
}

TEST_CASE("Mtla's parallel form refuses mismatched queries and outputs, and writes nothing") {
  using V = MtlaS<2>;
  std::mt19937 rng(7);
  const auto p = random_mtla_params<V>(kShape, rng);
  const RowMatrixXf lat = random_matrix(5, V::rank, rng), kr = random_matrix(5, V::rope_dim, rng);
  exec::CpuSimd cpu(1);
  RowMatrixXf out = RowMatrixXf::Constant(5, V::output_width(kShape), 7.0f);
  const RowMatrixXf short_q = random_matrix(4, V::query_width(kShape), rng);
  check_throws_with<ShapeError>([&] { mtla_parallel_attention<V>(cpu, kShape, p, short_q, {lat, kr}, out); }, "q is (4, ");
  const RowMatrixXf q = random_matrix(5, V::query_width(kShape), rng);
  RowMatrixXf narrow(5, V::output_width(kShape) - 1);
  check_throws_with<ShapeError>([&] { mtla_parallel_attention<V>(cpu, kShape, p, q, {lat, kr}, narrow); }, "out is (5, ");
  const RowMatrixXf short_kr = kr.topRows(4);
  check_throws_with<ShapeError>([&] { mtla_parallel_attention<V>(cpu, kShape, p, q, {lat, short_kr}, out); }, "but rope_key has 4");
  CHECK((out.array() == 7.0f).all());
}

TEST_CASE("Mtla's block cache update is the paper's per-token formula") {
  using V = MtlaS<3>;
  std::mt19937 rng(8);
  const auto p = random_mtla_params<V>(kShape, rng);
  const RowMatrixXf lat = random_matrix(5, V::rank, rng), kr = random_matrix(5, V::rope_dim, rng);
  SlotStore block{V::rank + V::rope_dim, {}}, one_by_one{V::rank + V::rope_dim, {}};
  std::vector<double> open_block(V::rank), open_one(V::rank);
  V::write_rows(block, 0, 0, kShape, p, {lat, kr}, 0, 5, open_block.data());  // tokens 0..4: slot 0 full, slot 1 holds 3 and 4
  for (int i = 0; i < 5; ++i) V::write_rows(one_by_one, 0, i, kShape, p, {lat, kr}, i, 1, open_one.data());
  for (int slot = 0; slot < 2; ++slot) {
    Eigen::RowVectorXd expected = Eigen::RowVectorXd::Zero(V::rank);
    for (int i = 3 * slot; i < std::min(5, 3 * slot + 3); ++i) {
      const auto c = V::layer_norm<double>(p, lat.row(i));
      expected += V::merge_weight<double>(p, c, slot) * c;  // w_i = sigmoid(<Lin_p(PE(j)), Lin_c(c_i)>)
    }
    const Eigen::Map<const Eigen::RowVectorXd> got(block.data.data() + slot * block.width, V::rank);
    const Eigen::Map<const Eigen::RowVectorXd> got1(one_by_one.data.data() + slot * block.width, V::rank);
    CHECK((got - expected).cwiseAbs().maxCoeff() <= 1e-13);
    CHECK((got1 - expected).cwiseAbs().maxCoeff() <= 1e-13);
    const int newest = std::min(4, 3 * slot + 2);  // the slot's RoPE key is its newest token's
    for (int k = 0; k < V::rope_dim; ++k) CHECK(block.data[std::size_t(slot * block.width + V::rank + k)] == double(kr(newest, k)));
  }
}

TEST_CASE_TEMPLATE("Mtla merges a 16-bit row in double and rounds it once", T, Eigen::half, Eigen::bfloat16) {
  // Re-rounding the row at every merge (T(T(w0 c0) + w1 c1) ...) would add up to one rounding
  // per merged token; the row must instead be the rounding of the exact sum.
  using V = MtlaS<3>;
  std::mt19937 rng(12);
  const auto p = random_mtla_params<V>(kShape, rng);
  Attention<V, Hnd, exec::Reference, T> attn(kShape, {.max_sequences = 2, .capacity = 4}, p);
  const int other = attn.open_sequence(), seq = attn.open_sequence();  // two sequences: each keeps its own sum
  const int n = 8;  // slots 0 and 1 full, slot 2 holds two tokens
  const RowMatrixXf lat = random_matrix(n, V::rank, rng), kr = random_matrix(n, V::rope_dim, rng);
  for (int i = 0; i < n; ++i) {
    const int both[] = {other, seq};
    RowMatrixXf lat2(2, V::rank), kr2(2, V::rope_dim), out2(2, V::output_width(kShape));
    lat2 << lat.row(n - 1 - i), lat.row(i);
    kr2 << kr.row(n - 1 - i), kr.row(i);
    attn.decode(both, random_matrix(2, V::query_width(kShape), rng), {lat2, kr2}, out2);
  }
  for (int slot = 0; slot * V::stride < n; ++slot) {
    Eigen::RowVectorXd sum = Eigen::RowVectorXd::Zero(V::rank);
    for (int i = slot * V::stride; i < std::min(n, (slot + 1) * V::stride); ++i) {
      const auto c = V::layer_norm<double>(p, lat.row(i));
      sum += V::merge_weight<double>(p, c, slot) * c;
    }
    const T* row = attn.cache().row(0, seq, slot, 0);
    for (int k = 0; k < V::rank; ++k) {
      INFO("slot ", slot, " k ", k);
      CHECK(float(row[k]) == float(T(sum(k))));
    }
  }
}

TEST_CASE("Mtla with stride 1 opens a slot for every token (the reference code's T % s != 1 never does)") {
  using V = MtlaS<1>;
  std::mt19937 rng(5);
  const auto p = random_mtla_params<V>(kShape, rng);
  Attention<V, Nhd, exec::Reference> attn(kShape, {.max_sequences = 1, .capacity = 8}, p);
  const int seq = attn.open_sequence();
  const int one[] = {seq};
  for (int i = 1; i <= 5; ++i) {
    RowMatrixXf q = random_matrix(1, V::query_width(kShape), rng), lat = random_matrix(1, 16, rng), kr = random_matrix(1, 4, rng);
    RowMatrixXf out(1, V::output_width(kShape));
    attn.decode(one, q, {lat, kr}, out);
    CHECK(attn.length(seq) == i);
    CHECK(attn.cache_rows(seq) == i);
  }
}

// A batched decode checks the page pool for the whole batch before it writes (issue #11, bug 1):
// with 2 tokens per row, a sequence holding an odd number of tokens merges its next token into its
// open row (no new page) while one holding an even number opens a row (a page of one row).
TEST_CASE("Mtla on a paged cache: a batch that needs more pages than are free changes nothing") {
  using V = MtlaS<2>;
  std::mt19937 rng(8);
  const auto p = random_mtla_params<V>(kShape, rng);
  Attention<V, Paged<1>, exec::Reference> attn(kShape, {.max_sequences = 3, .capacity = 4, .pool_pages = 4, .poison_unused = true}, p);
  const int qw = V::query_width(kShape), ow = V::output_width(kShape);
  const auto prefill = [&](int seq, int n) {
    RowMatrixXf out(n, ow);
    attn.prefill(seq, random_matrix(n, qw, rng), {random_matrix(n, V::rank, rng), random_matrix(n, V::rope_dim, rng)}, Mask::causal, out);
  };
  const int a = attn.open_sequence(), b = attn.open_sequence(), c = attn.open_sequence();
  prefill(a, 1);  // row 0 half full: its next token needs no page
  prefill(b, 2);  // row 0 full: its next token opens row 1
  prefill(c, 2);
  REQUIRE(attn.cache().free_pages() == 1);
  const int abc[] = {a, b, c};
  const RowMatrixXf q = random_matrix(3, qw, rng), lat = random_matrix(3, V::rank, rng), kr = random_matrix(3, V::rope_dim, rng);
  RowMatrixXf before(3, ow), out(3, ow);
  attn.attend(abc, q, before);
  check_throws_with<CapacityError>([&] { attn.decode(abc, q, {lat, kr}, out); },
                                   "page pool exhausted: the 3 sequences of this call need 2 more page(s)");
  CHECK(attn.length(a) == 1);
  CHECK(attn.length(b) == 2);
  CHECK(attn.length(c) == 2);
  CHECK(attn.cache().free_pages() == 1);
  attn.attend(abc, q, out);
  CHECK(out == before);  // a's open row was not merged into either
  // a (no new row) and b (one) fit together.
  const int ab[] = {a, b};
  attn.decode(ab, q.topRows(2), {lat.topRows(2), kr.topRows(2)}, out.topRows(2));
  CHECK(attn.length(a) == 2);
  CHECK(attn.cache_rows(a) == 1);
  CHECK(attn.cache_rows(b) == 2);
  CHECK(attn.cache().free_pages() == 0);
}

TEST_CASE_TEMPLATE("Mtla in fp32: decode, chunked prefill and batched decode equal the parallel path", C,
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MTLA_COMBOS, MtlaS<1>), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MTLA_COMBOS, MtlaS<2>),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MTLA_COMBOS, MtlaS<3>), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_MTLA_COMBOS, MtlaS<4>)) {
  mtla_decode_prefill_scenario<typename C::type>(kShape);
}

TEST_CASE_TEMPLATE("Mtla: CpuSimd equals Reference, and a full-mask prefill sees every merged slot", C, LayoutElement<Nhd>,
                   LayoutElement<Hnd>, LayoutElement<Paged<16>>, LayoutElement<Paged<5>>, LayoutElement<Hnd, Eigen::half>,
                   LayoutElement<Paged<5>, Eigen::bfloat16>) {
  // Both executors read the same (16-bit: rounded) merged rows. The parallel path below merges in
  // double and never rounds, so it is the oracle of the float cache only.
  using V = Mtla<36, 3, 6>;
  using L = typename C::layout;
  using T = typename C::element;
  const AttentionShape s{4, 16};
  std::mt19937 rng(21);
  const auto p = random_mtla_params<V>(s, rng);
  Attention<V, L, exec::Reference, T> ref(s, {.max_sequences = 1, .capacity = 400, .poison_unused = true}, p);
  Attention<V, L, exec::CpuSimd, T> cpu(s, {.max_sequences = 2, .capacity = 400, .poison_unused = true}, p, 2);
  const int seq = ref.open_sequence();
  REQUIRE(cpu.open_sequence() == seq);
  const int n = 1000;  // 334 slots: CpuSimd splits them across threads
  const RowMatrixXf q = random_matrix(n, V::query_width(s), rng), lat = random_matrix(n, V::rank, rng);
  const RowMatrixXf kr = random_matrix(n, V::rope_dim, rng);
  RowMatrixXf out_ref(n, V::output_width(s)), out_cpu(n, V::output_width(s));
  ref.prefill(seq, q, {lat, kr}, Mask::full, out_ref);
  cpu.prefill(seq, q, {lat, kr}, Mask::full, out_cpu);
  CHECK(ref.cache_rows(seq) == 334);
  CHECK(max_abs_diff(out_ref, out_cpu) <= 1e-5);
  if constexpr (!std::is_same_v<T, float>) return;
  // Full mask: every query against the final slots, which is what the last token sees; so query
  // i's output is the parallel path's last row with q_i put in the last token's place.
  const int seq2 = cpu.open_sequence(), m = 40;
  const RowMatrixXf q2 = q.topRows(m), lat2 = lat.topRows(m), kr2 = kr.topRows(m);
  RowMatrixXf out2(m, V::output_width(s));
  cpu.prefill(seq2, q2, {lat2, kr2}, Mask::full, out2);
  for (int i : {0, 17, m - 1}) {
    RowMatrixXf q_in_last = q2;
    q_in_last.row(m - 1) = q2.row(i);
    const RowMatrixXd parallel = mtla_parallel_oracle<V>(s.n_heads, s.head_dim, p, q_in_last, lat2, kr2);
    INFO("query ", i);
    CHECK(max_abs_diff(out2.row(i), RowMatrixXd(parallel.bottomRows(1))) <= 1e-5);
  }
}

TEST_CASE_TEMPLATE("Mtla: calls with zero rows change nothing", E, exec::Reference, exec::CpuSimd) {
  using V = MtlaS<3>;
  std::mt19937 rng(13);
  Attention<V, Hnd, E> attn(kShape, {.max_sequences = 2, .capacity = 8, .poison_unused = true}, random_mtla_params<V>(kShape, rng), 2);
  const RowMatrixXf q = random_matrix(4, V::query_width(kShape), rng), lat = random_matrix(4, V::rank, rng);
  const RowMatrixXf kr = random_matrix(4, V::rope_dim, rng);
  const RowMatrixXf no_q(0, q.cols()), no_lat(0, V::rank), no_kr(0, V::rope_dim);
  check_zero_row_calls(attn, q, {lat, kr}, no_q, {no_lat, no_kr});
}
