// exec::Cuda against the dense oracle and the Reference executor. The Attention scenarios are the
// CPU executors' (support/equivalence_scenarios.hpp, support/latent_scenarios.hpp) over every
// variant x layout: Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa; SlimK2 and XCache on converted layers
// against Reference; Mla (absorbed decode) against the expanded computation; Mtla (rows rewritten
// after the mirror copied them) against its parallel path. The AttendSpec cases drive the primitive directly
// (one tensor for keys and values, column offsets, groups wider than a block's tile, rows wider
// than 256 and 1024). The cross-attention cache options (baseline, K-only, E-cache, hybrid) run
// the CPU executors' scenario (support/cross_scenarios.hpp). 16-bit caches (half, bfloat16)
// against float caches of pre-rounded rows and against Reference. Scores at their limits (-inf,
// overflow, no visible token; support/attend_limits.hpp) as on the CPU executors. Not on Cuda:
// variants that derive rows at attend time (SlimK option 1, SlimK with RoPE), refused at compile
// time (core/attend_with_hooks.hpp).
// Without a CUDA device the GPU cases are skipped with a message; the host-only cases still run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/core/sliding_window.hpp>
#include <polyattn/convert/x_cache.hpp>
#include <polyattn/exec/cuda/cuda.cuh>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/uncached_attention.hpp>
#include <polyattn/layers/cross_cache.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/mtla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/attend_limits.hpp"
#include "support/attend_spec.hpp"
#include "support/cross_scenarios.hpp"
#include "support/cuda_device.hpp"
#include "support/dense_oracle.hpp"
#include "support/combos.hpp"
#include "support/equivalence_scenarios.hpp"
#include "support/executor_tolerance.hpp"
#include "support/fork_scenarios.hpp"
#include "support/window_scenarios.hpp"
#include "support/latent_scenarios.hpp"
#include "support/rounded_cache.hpp"
#include "support/mha_layer.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

const bool kNoDevice = !have_cuda_device();  // prints why GPU cases are skipped

}  // namespace

/// A CUDA combination (support/combos.hpp), for the hand-picked lists below.
template <class V, class L, class M = PrefixMask>
using CudaCombo = Combo<V, L, exec::Cuda, float, M>;

// Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa x every layout (long sequences split across blocks).
TEST_CASE_TEMPLATE("cuda: the equivalence scenarios match the dense oracle" * doctest::skip(kNoDevice), C,
                   POLYATTN_EQUIVALENCE_COMBOS(exec::Cuda)) {
  run_equivalence_scenarios<typename C::type>();
}

// The attend primitive at the limits of its scores (core/attend.hpp): the CPU executors' cases.
TEST_CASE_TEMPLATE("cuda: -inf, overflowing and huge scores give the same limits as on the CPU" * doctest::skip(kNoDevice), Layout,
                   Nhd, Paged<7>) {
  attend_limits_scenario<Layout, exec::Cuda>(0);
}

// The same cases on 64-wide rows, which take the streaming decode kernel (stream_plan.hpp); the
// 20- and 12-wide rows above take the tiled one.
TEST_CASE_TEMPLATE("cuda: the streaming kernel gives the same limits as on the CPU" * doctest::skip(kNoDevice), Layout, Nhd,
                   Paged<7>) {
  attend_limits_scenario<Layout, exec::Cuda>(0, {64, 64});
}

// ---- Variants with host-side hooks around the device attend ------------------------------------

TEST_CASE_TEMPLATE("cuda: SlimK2 and XCache on converted layers match the Reference executor" * doctest::skip(kNoDevice), C,
                   POLYATTN_LAYOUT_COMBOS(SlimK2, exec::Cuda), POLYATTN_LAYOUT_COMBOS(XCache, exec::Cuda)) {
  using V = typename C::variant;
  using L = typename C::layout;
  // cond(W_k) 10 and 1e3: slim's W_kv (and with it the tolerance) grows with it. length_b = 1: a
  // sequence of one token in every decode batch.
  for (double cond : {10.0, 1e3})
    for (int head_dim : {16, 20})
      for (int length_b : {7, 1}) {
        const AttentionShape shape{6, head_dim};
        std::mt19937 rng(17 + head_dim);
        const LayerModel m = random_layer_model(shape, cond, rng);
        const Script s = Script::random(shape.input_width(), rng, 4, 0.0, length_b);
        Attention<V, Nhd, exec::Reference> ref(shape, script_cache(), params_for<V>(m));
        Attention<V, L, exec::Cuda> cuda(shape, script_cache(), params_for<V>(m));
        const RowMatrixXf want = run_script(ref, m, s), got = run_script(cuda, m, s);
        const double tol = executor_tolerance<V>(m, s, script_cache().capacity);
        INFO(decltype(cuda)::name(), " cond ", cond, " head_dim ", head_dim, " length_b ", length_b, " tolerance ", tol);
        CHECK(max_abs_diff(got, want) <= tol);
        // A wrong row, head or stale mirror moves y by O(max|y|) (slim: times cond(W_k)): the bound stays below that.
        CHECK(tol <= 0.1 * want.cwiseAbs().maxCoeff());
      }
}

// The four cross-attention cache options on the GPU (one device mirror per per-layer store):
// the same scenario and tolerance as on the CPU executors (tests/test_cross_cache.cpp).
TEST_CASE_TEMPLATE("cuda: cross-attention cache options match MHA cross-attention" * doctest::skip(kNoDevice), Option, cross::Baseline,
                   cross::KOnly, cross::SharedE, cross::Hybrid) {
  check_cross_option<Option, Hnd, exec::Cuda>(100.0);
  check_cross_option<Option, Paged<16>, exec::Cuda>(100.0);
}

// 16-bit caches (Eigen::half, Eigen::bfloat16 on the host; __half, __nv_bfloat16 on the device):
// Mha gives bit for bit what a float cache of the pre-rounded rows gives on every layout, and
// SlimK2 / XCache match the Reference executor reading the same 16-bit caches.
TEST_CASE_TEMPLATE("cuda: 16-bit caches read back exactly what was rounded on write" * doctest::skip(kNoDevice), T, Eigen::half,
                   Eigen::bfloat16) {
  const RoundedCacheInputs in(9);
  check_rounded_once<T, Nhd, exec::Cuda>(in);
  check_rounded_once<T, Hnd, exec::Cuda>(in);
  check_rounded_once<T, Paged<16>, exec::Cuda>(in);
  check_rounded_once<T, Paged<7>, exec::Cuda>(in);
}

template <class V, class T>
void check_16_bit_layer() {
  const AttentionShape shape{6, 16};
  std::mt19937 rng(23);
  const LayerModel m = random_layer_model(shape, 100.0, rng);
  const Script s = Script::random(shape.input_width(), rng, 4, 0.0, 7);
  Attention<V, Nhd, exec::Reference, T> ref(shape, script_cache(), params_for<V>(m));
  Attention<V, Hnd, exec::Cuda, T> cuda(shape, script_cache(), params_for<V>(m));
  const RowMatrixXf want = run_script(ref, m, s), got = run_script(cuda, m, s);
  // Both read the same rounded rows; the bound is executor_tolerance's (fp32 against exact) for
  // norms of keys and values that rounding to T grew by at most (1 + u) each.
  const double u = unit_roundoff<T>();
  const double tol = executor_tolerance<V>(m, s, script_cache().capacity) * (1 + u) * (1 + u);
  INFO(decltype(cuda)::name(), " with ", sizeof(T) * 8, "-bit elements, tolerance ", tol);
  CHECK(max_abs_diff(got, want) <= tol);
}

TEST_CASE_TEMPLATE("cuda: SlimK2 and XCache over 16-bit caches match the Reference executor" * doctest::skip(kNoDevice), T, Eigen::half,
                   Eigen::bfloat16) {
  check_16_bit_layer<SlimK2, T>();
  check_16_bit_layer<XCache, T>();
}

using MlaRope = Mla<24, 8, MlaKeyPart::decoupled_rope>;  // DeepSeek form
using MlaKeep = Mla<20, 4, MlaKeyPart::preserved>;       // Whisper-MLA form
using MlaFull = Mla<17, 0, MlaKeyPart::preserved>;       // full compression, odd rank
using MlaWide = Mla<512, 64>;                            // DeepSeek-V2's latent: rows of 576, 2 column slots

template <class V>
constexpr AttentionShape mla_shape() {
  if constexpr (std::is_same_v<V, MlaRope>) return {4, 16};
  if constexpr (std::is_same_v<V, MlaKeep>) return {4, 12};
  if constexpr (std::is_same_v<V, MlaWide>) return {10, 128};  // 10 heads: a full and a partial group tile
  return {3, 10};
}

TEST_CASE_TEMPLATE("cuda: Mla absorbed prefill and batched decode equal the expanded computation" * doctest::skip(kNoDevice), C,
                   POLYATTN_MLA_COMBOS(MlaRope, exec::Cuda), POLYATTN_MLA_COMBOS(MlaKeep, exec::Cuda),
                   POLYATTN_MLA_COMBOS(MlaFull, exec::Cuda), POLYATTN_MLA_COMBOS(MlaWide, exec::Cuda)) {
  using A = typename C::type;
  mla_prefill_then_batched_decode_scenario<A>(mla_shape<typename A::variant_type>());
}

template <int S>
using MtlaS = Mtla<16, S, 4>;

// Each decode of stride > 1 merges into the row the mirror copied at the previous step.
TEST_CASE_TEMPLATE("cuda: Mtla decode, chunked prefill and batched decode equal the parallel path" * doctest::skip(kNoDevice), C,
                   POLYATTN_MTLA_COMBOS(MtlaS<1>, exec::Cuda), POLYATTN_MTLA_COMBOS(MtlaS<2>, exec::Cuda),
                   POLYATTN_MTLA_COMBOS(MtlaS<3>, exec::Cuda), POLYATTN_MTLA_COMBOS(MtlaS<4>, exec::Cuda)) {
  mtla_decode_prefill_scenario<typename C::type>({3, 8});
}

// The fork family's layouts (support/combos.hpp), one variant on each rather than every variant on
// all three: each CUDA instantiation costs nvcc time in a build that cannot run it without a GPU.
TEST_CASE_TEMPLATE("cuda: forked sequences (beams) equal a replay on the device" * doctest::skip(kNoDevice), C, CudaCombo<Mha, Nhd>,
                   CudaCombo<Gqa<2>, Hnd>, CudaCombo<Mha, Paged<4>>, CudaCombo<MtlaS<3>, Paged<4>>, CudaCombo<SlimK2, Paged<4>>,
                   CudaCombo<XCache, Hnd>, CudaCombo<Mla<12, 4, MlaKeyPart::preserved>, Paged<4>>) {
  fork_equals_replay<typename C::type>();
}

// The window family's combinations (support/combos.hpp), one layout per variant.
TEST_CASE_TEMPLATE("cuda: a sliding window reads only its tokens: prefill and batched decode match the dense oracle" *
                       doctest::skip(kNoDevice),
                   C, CudaCombo<Mha, Nhd, SlidingWindow<24>>, CudaCombo<Gqa<2>, Paged<7>, SlidingWindow<24>>,
                   CudaCombo<SlimK2, Hnd, SlidingWindow<24>>) {
  window_prefill_and_decode<typename C::type>();
}

TEST_CASE("cuda: a fork on Paged<P> uploads only its own pages' rows, the shared ones being on the device" *
          doctest::skip(kNoDevice)) {
  const AttentionShape s{2, 8};
  std::mt19937 rng(3);
  Attention<Mha, Paged<4>, exec::Cuda> attn(s, {.max_sequences = 3, .capacity = 32, .poison_unused = true});
  const int parent = attn.open_sequence();
  const RandomRows<Mha> prefix(s, 10, rng);  // two full pages, two tokens on a third
  RowMatrixXf out(10, s.query_width());
  attn.prefill(parent, random_matrix(10, s.query_width(), rng), prefix.view(), Mask::causal, out);
  const std::uint64_t before = attn.executor().rows_uploaded();
  CHECK(before == 10);
  const int child = attn.fork(parent);
  const RandomRows<Mha> step(s, 2, rng);
  RowMatrixXf step_out(2, s.query_width());
  attn.decode(std::vector<int>{parent, child}, random_matrix(2, s.query_width(), rng), step.view(), step_out);
  // The parent's new token; the child's copy of the partly filled page (2 rows) and its new token.
  CHECK(attn.executor().rows_uploaded() - before == 1 + 3);
}

TEST_CASE_TEMPLATE("cuda: Mtla over many slots equals Reference, rows merged after a long prefill" * doctest::skip(kNoDevice), L, Nhd,
                   Hnd, Paged<16>, Paged<7>) {
  using V = Mtla<36, 3, 6>;
  const AttentionShape s{4, 16};
  std::mt19937 rng(21);
  const auto p = random_mtla_params<V>(s, rng);
  Attention<V, L, exec::Reference> ref(s, {.max_sequences = 2, .capacity = 400, .poison_unused = true}, p);
  Attention<V, L, exec::Cuda> cuda(s, {.max_sequences = 2, .capacity = 400, .poison_unused = true}, p);
  const int a = ref.open_sequence(), b = ref.open_sequence();
  REQUIRE(cuda.open_sequence() == a);
  REQUIRE(cuda.open_sequence() == b);
  const double tol = 1e-5;  // as the CPU executors: O(1) outputs, bounded weights
  // 1000 tokens (334 slots, the last holding one token: chunks split across blocks), and 4.
  for (auto [seq, n] : {std::pair{a, 1000}, std::pair{b, 4}}) {
    const RowMatrixXf q = random_matrix(n, V::query_width(s), rng), lat = random_matrix(n, V::rank, rng);
    const RowMatrixXf kr = random_matrix(n, V::rope_dim, rng);
    RowMatrixXf out_ref(n, V::output_width(s)), out_cuda(n, V::output_width(s));
    ref.prefill(seq, q, {lat, kr}, Mask::full, out_ref);
    cuda.prefill(seq, q, {lat, kr}, Mask::full, out_cuda);
    CHECK(max_abs_diff(out_cuda, out_ref) <= tol);
  }
  // Decode steps that merge into the open slots of both sequences (1000 % 3 = 1, 4 % 3 = 1).
  const int both[] = {b, a};
  for (int step = 0; step < 4; ++step) {
    const RowMatrixXf q = random_matrix(2, V::query_width(s), rng), lat = random_matrix(2, V::rank, rng);
    const RowMatrixXf kr = random_matrix(2, V::rope_dim, rng);
    RowMatrixXf out_ref(2, V::output_width(s)), out_cuda(2, V::output_width(s));
    ref.decode(both, q, {lat, kr}, out_ref);
    cuda.decode(both, q, {lat, kr}, out_cuda);
    INFO("step ", step);
    CHECK(max_abs_diff(out_cuda, out_ref) <= tol);
  }
  CHECK(cuda.cache_rows(a) == 335);
}

namespace {

/// A store of one or two tensors filled with random rows, queried through `spec` by both
/// executors; sequences grow between calls so the mirror is updated incrementally.
template <class Layout>
void check_spec_against_reference(const std::vector<TensorSpec>& tensors, const AttendSpec& spec,
                                  exec::Cuda::Kernel kernel = exec::Cuda::Kernel::automatic) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  CacheStore<Layout, float> store(tensors, {.max_sequences = 3, .capacity = 700, .poison_unused = true});
  const int a = store.open(), b = store.open();
  const auto grow = [&](int seq, int n) {
    const int first = store.grow(seq, n);
    for (int t = 0; t < int(tensors.size()); ++t)
      for (int token = first; token < first + n; ++token)
        for (int h = 0; h < tensors[std::size_t(t)].heads; ++h)
          for (int i = 0; i < tensors[std::size_t(t)].dim; ++i) store.row(t, seq, token, h)[i] = dist(rng);
  };
  exec::Cuda cuda;
  cuda.set_kernel(kernel);
  exec::Reference reference;
  const std::size_t q_row = std::size_t(spec.query_heads()) * spec.key_dim, out_row = std::size_t(spec.query_heads()) * spec.value_dim;
  for (int round = 0; round < 3; ++round) {
    grow(a, round == 0 ? 600 : 1);
    grow(b, round == 0 ? 5 : 3);
    const std::vector<std::pair<int, int>> rows = {{a, store.length(a)}, {b, store.length(b)}, {a, 17}, {b, 1}};
    std::vector<float> q(rows.size() * q_row), got(rows.size() * out_row), want(rows.size() * out_row);
    for (float& x : q) x = dist(rng);
    std::vector<QueryJob> jobs_cuda, jobs_ref;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      jobs_cuda.push_back({rows[i].first, rows[i].second, q.data() + i * q_row, got.data() + i * out_row});
      jobs_ref.push_back({rows[i].first, rows[i].second, q.data() + i * q_row, want.data() + i * out_row});
    }
    cuda.attend(std::as_const(store), spec, jobs_cuda);
    reference.attend(std::as_const(store), spec, jobs_ref);
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    INFO(Layout::name(), " round ", round, " key_dim ", spec.key_dim, " value_dim ", spec.value_dim, " group ", spec.group,
         kernel == exec::Cuda::Kernel::general ? " (general kernel)" : "");
    // Scores are scaled by `scale`, not 1/sqrt(key_dim): widen the score term accordingly.
    const double ds_scale = double(spec.scale) * std::sqrt(double(spec.key_dim));
    CHECK(worst <= std::max(1.0, ds_scale) * fp32_attention_tolerance(spec.key_dim, store.length(a)));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("cuda: the attend primitive matches the Reference executor for other variants' specs" *
                       doctest::skip(kNoDevice),
                   Layout, Nhd, Hnd, Paged<16>, Paged<7>) {
  // K-only cache (slim attention option 2): keys and values are the same rows.
  check_spec_against_reference<Layout>({{2, 40}}, attend_spec(2, 3, 0, 0, 40, 0, 0, 40));
  // Column offsets, and a group of 11 query heads per cache head (two tiles of 8).
  check_spec_against_reference<Layout>({{2, 40}, {2, 50}}, attend_spec(2, 11, 0, 3, 30, 1, 7, 37));
  // X-cache: one shared head holding x (d_model 384) for 6 query heads; rows wider than 256.
  check_spec_against_reference<Layout>({{1, 384}}, attend_spec(1, 6, 0, 0, 384, 0, 0, 384));
  // MLA absorbed decode: keys = latent | rope (512 + 64), values = the latent, 16 heads.
  check_spec_against_reference<Layout>({{1, 576}}, attend_spec(1, 16, 0, 0, 576, 0, 0, 512));
  // Widest rows: a query tile above 48 KiB of shared memory, values in 8 column slots.
  check_spec_against_reference<Layout>({{1, 1600}}, attend_spec(1, 2, 0, 0, 1600, 0, 500, 1100));
  // Shapes the tiled kernel takes (tile_plan.hpp): MHA's separate key and value tensors; heads
  // packed in one row (key_group_stride, slim K-only option 2); 20 heads on one cache head (a
  // tile of 16 and a tile of 4).
  check_spec_against_reference<Layout>({{2, 64}, {2, 64}}, attend_spec(2, 1, 0, 0, 64, 1, 0, 64));
  check_spec_against_reference<Layout>({{1, 128}}, attend_spec(1, 4, 0, 0, 32, 0, 0, 128, 32));
  check_spec_against_reference<Layout>({{1, 64}, {1, 64}}, attend_spec(1, 20, 0, 0, 64, 1, 0, 64));
}

// The streaming decode kernel (stream_plan.hpp) on every width and group it takes: 8, 16 and 32
// lanes a row, a group of 3 in a tile of 4, 8 heads on one key row (MQA), column offsets inside
// wider rows; and the tiled kernel, forced, where the streaming one would run.
TEST_CASE_TEMPLATE("cuda: the streaming kernel matches the Reference executor" * doctest::skip(kNoDevice), Layout, Nhd, Hnd,
                   Paged<16>, Paged<7>) {
  check_spec_against_reference<Layout>({{2, 32}, {2, 32}}, attend_spec(2, 1, 0, 0, 32, 1, 0, 32));
  check_spec_against_reference<Layout>({{2, 128}, {2, 128}}, attend_spec(2, 1, 0, 0, 128, 1, 0, 128));
  check_spec_against_reference<Layout>({{2, 64}, {2, 64}}, attend_spec(2, 3, 0, 0, 64, 1, 0, 64));
  check_spec_against_reference<Layout>({{1, 64}, {1, 64}}, attend_spec(1, 8, 0, 0, 64, 1, 0, 64));
  check_spec_against_reference<Layout>({{1, 72}, {1, 80}}, attend_spec(1, 2, 0, 4, 64, 1, 8, 64));
  const auto tiled = exec::Cuda::Kernel::tiled;
  check_spec_against_reference<Layout>({{2, 64}, {2, 64}}, attend_spec(2, 1, 0, 0, 64, 1, 0, 64), tiled);
  check_spec_against_reference<Layout>({{2, 64}, {2, 64}}, attend_spec(2, 2, 0, 0, 64, 1, 0, 64), tiled);
}

namespace {

/// Mha or Gqa<2> over a 16-bit cache of 4 heads of `head_dim`, 700 tokens (prefill 9, decode the
/// rest), on exec::Cuda (decode on the streaming kernel: 8 or 16 lanes of 8 elements) and on the
/// Reference executor reading the same rounded rows; both accumulate in at least fp32.
template <class V, class Layout, class T>
void check_16_bit_stream(int head_dim) {
  const AttentionShape shape{4, head_dim};
  const int n = 700;
  std::mt19937 rng(31);
  const RowMatrixXf q = random_matrix(n, V::query_width(shape), rng);
  const RowMatrixXf k = random_matrix(n, V::kv_heads(shape) * head_dim, rng), v = random_matrix(n, V::kv_heads(shape) * head_dim, rng);
  const CacheConfig config{.max_sequences = 2, .capacity = n + 5, .poison_unused = true};
  Attention<V, Layout, exec::Reference, T> ref(shape, config);
  Attention<V, Layout, exec::Cuda, T> cuda(shape, config);
  const RowMatrixXf want = prefill_then_decode(ref, q, k, v), got = prefill_then_decode(cuda, q, k, v);
  INFO(decltype(cuda)::name(), " with ", sizeof(T) * 8, "-bit elements, head_dim ", head_dim);
  CHECK(max_abs_diff(got, want) <= fp32_attention_tolerance(head_dim, n));
}

}  // namespace

TEST_CASE_TEMPLATE("cuda: the streaming kernel over 16-bit caches matches the Reference executor" * doctest::skip(kNoDevice), T,
                   Eigen::half, Eigen::bfloat16) {
  check_16_bit_stream<Mha, Nhd, T>(64);
  check_16_bit_stream<Mha, Paged<16>, T>(128);
  check_16_bit_stream<Gqa<2>, Hnd, T>(64);
}

TEST_CASE_TEMPLATE("cuda: the general kernel, forced, matches the Reference executor where the tiled one would run" *
                       doctest::skip(kNoDevice),
                   Layout, Nhd, Paged<7>) {
  const auto general = exec::Cuda::Kernel::general;
  check_spec_against_reference<Layout>({{2, 40}}, attend_spec(2, 3, 0, 0, 40, 0, 0, 40), general);
  check_spec_against_reference<Layout>({{1, 576}}, attend_spec(1, 16, 0, 0, 576, 0, 0, 512), general);
  check_spec_against_reference<Layout>({{2, 64}, {2, 64}}, attend_spec(2, 1, 0, 0, 64, 1, 0, 64), general);
}

namespace {

/// A prefill through the primitive in one call over two sequences (a ragged batch): sequence a
/// holds `cached` tokens and then the `n` rows' own, which row i sees causally (the cached ones
/// and new ones up to i) or fully; sequence b, 37 rows causally. Unused capacity is NaN. With a
/// sliding window, the value of a's first token is +inf: rows whose window has left it must not
/// read it (0 * inf), and only those rows of a are compared. exec::Cuda (the prefill kernel, or
/// the general one when forced) against exec::Reference.
template <class Layout, class KeyMaskT = PrefixMask>
void check_prefill_against_reference(const std::vector<TensorSpec>& tensors, const AttendSpec& spec, int cached, int n, Mask mask,
                                     exec::Cuda::Kernel kernel = exec::Cuda::Kernel::automatic) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int n_b = 37;
  CacheStore<Layout, float> store(tensors, {.max_sequences = 2, .capacity = std::max(cached + n, n_b) + 3, .poison_unused = true});
  const int a = store.open(), b = store.open();
  for (auto [seq, count] : {std::pair{a, cached + n}, std::pair{b, n_b}}) {
    store.grow(seq, count);
    for (int t = 0; t < int(tensors.size()); ++t)
      for (int token = 0; token < count; ++token)
        for (int h = 0; h < tensors[std::size_t(t)].heads; ++h)
          for (int i = 0; i < tensors[std::size_t(t)].dim; ++i) store.row(t, seq, token, h)[i] = dist(rng);
  }
  constexpr bool windowed = !std::is_same_v<KeyMaskT, PrefixMask>;
  if (windowed)
    for (int h = 0; h < spec.cache_heads; ++h) store.row(spec.value_tensor, a, 0, h)[spec.value_offset] = INFINITY;

  std::vector<QueryJob> rows;
  for (int i = 0; i < n; ++i) rows.push_back({a, mask == Mask::full ? cached + n : cached + i + 1, nullptr, nullptr});
  for (int i = 0; i < n_b; ++i) rows.push_back({b, i + 1, nullptr, nullptr});
  const std::size_t q_row = std::size_t(spec.query_heads()) * spec.key_dim, out_row = std::size_t(spec.query_heads()) * spec.value_dim;
  std::vector<float> q(rows.size() * q_row), got(rows.size() * out_row, NAN), want(rows.size() * out_row, NAN);
  for (float& x : q) x = dist(rng);
  std::vector<QueryJob> jobs_cuda = rows, jobs_ref = rows;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    jobs_cuda[i].query = jobs_ref[i].query = q.data() + i * q_row;
    jobs_cuda[i].out = got.data() + i * out_row;
    jobs_ref[i].out = want.data() + i * out_row;
  }
  exec::Cuda cuda;
  cuda.set_kernel(kernel);
  cuda.attend<KeyMaskT>(std::as_const(store), spec, jobs_cuda);
  exec::Reference().attend<KeyMaskT>(std::as_const(store), spec, jobs_ref);

  double worst = 0;
  int compared = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (windowed && rows[r].seq == a && KeyMaskT::range(rows[r]).first == 0) continue;  // sees the +inf value
    ++compared;
    for (std::size_t i = r * out_row; i < (r + 1) * out_row; ++i) {
      const double d = std::abs(double(got[i]) - double(want[i]));
      worst = std::isnan(d) ? d : std::max(worst, d);
      if (std::isnan(d)) break;
    }
    if (std::isnan(worst)) break;
  }
  INFO(Layout::name(), " cached ", cached, " rows ", n, mask == Mask::full ? " full" : " causal", " key_dim ", spec.key_dim, " value_dim ",
       spec.value_dim, " group ", spec.group, " kernel choice ", int(kernel), " (0 automatic, 1 simple prefill, 2 decode, 3 general)");
  CHECK(compared >= n_b);
  CHECK(worst <= fp32_attention_tolerance(spec.key_dim, cached + n));
}

}  // namespace

// The lengths #13 names, causal and full, alone and as a chunk after 100 cached tokens, on every
// layout (with sequence b's 37 rows in the same call, even 1 and 2 rows take the prefill kernel);
// on the register-tiled prefill kernel (automatic: every spec here fits it on an sm_80 or sm_90
// GPU) and on the simple one.
TEST_CASE_TEMPLATE("cuda: prefill over query blocks matches the Reference executor" * doctest::skip(kNoDevice), Layout, Nhd, Hnd,
                   Paged<16>, Paged<7>) {
  for (const auto kernel : {exec::Cuda::Kernel::automatic, exec::Cuda::Kernel::simple_prefill}) {
    const std::vector<TensorSpec> mha{{2, 64}, {2, 64}};
    const AttendSpec mha_spec = attend_spec(2, 1, 0, 0, 64, 1, 0, 64);
    for (int n : {1, 2, 63, 64, 65, 257, 1500})
      for (Mask mask : {Mask::causal, Mask::full}) check_prefill_against_reference<Layout>(mha, mha_spec, 0, n, mask, kernel);
    check_prefill_against_reference<Layout>(mha, mha_spec, 100, 65, Mask::causal, kernel);
    // GQA (3 query heads a cache head, keys 40 wide); heads packed in one row (slim K-only option
    // 2: keys and values the same row, value 128 wide); a key width that is not a multiple of 4, and
    // rows of 256 (the widest this kernel takes).
    check_prefill_against_reference<Layout>({{2, 40}, {2, 50}}, attend_spec(2, 3, 0, 0, 40, 1, 7, 37), 30, 100, Mask::causal, kernel);
    check_prefill_against_reference<Layout>({{1, 128}}, attend_spec(1, 4, 0, 0, 32, 0, 0, 128, 32), 0, 257, Mask::causal, kernel);
    check_prefill_against_reference<Layout>({{1, 45}, {1, 256}}, attend_spec(1, 2, 0, 0, 45, 1, 0, 256), 5, 70, Mask::full, kernel);
    check_prefill_against_reference<Layout>({{1, 256}, {1, 256}}, attend_spec(1, 1, 0, 0, 256, 1, 0, 256), 0, 100, Mask::causal, kernel);
    check_prefill_against_reference<Layout>({{1, 96}, {1, 130}}, attend_spec(1, 1, 0, 0, 96, 1, 0, 130), 0, 200, Mask::causal, kernel);
    // Rows wider than 256 (the X-cache's 384) stay on the decode kernels.
    check_prefill_against_reference<Layout>({{1, 384}}, attend_spec(1, 6, 0, 0, 384, 0, 0, 384), 0, 65, Mask::causal, kernel);
  }
}

TEST_CASE("cuda: prefill with a sliding window, and on the decode kernels forced, matches the Reference executor" *
          doctest::skip(kNoDevice)) {
  const std::vector<TensorSpec> mha{{2, 64}, {2, 64}};
  const AttendSpec mha_spec = attend_spec(2, 1, 0, 0, 64, 1, 0, 64);
  for (const auto kernel : {exec::Cuda::Kernel::automatic, exec::Cuda::Kernel::simple_prefill}) {
    for (int n : {63, 257, 1500}) check_prefill_against_reference<Nhd, SlidingWindow<48>>(mha, mha_spec, 0, n, Mask::causal, kernel);
    check_prefill_against_reference<Paged<7>, SlidingWindow<48>>(mha, mha_spec, 100, 65, Mask::causal, kernel);
  }
  check_prefill_against_reference<Nhd>(mha, mha_spec, 100, 257, Mask::causal, exec::Cuda::Kernel::decode);
  check_prefill_against_reference<Nhd>(mha, mha_spec, 100, 257, Mask::causal, exec::Cuda::Kernel::general);
}

namespace {

/// Cuda::attention over device copies of q, k and v (packed side by side in one matrix, as the
/// Whisper encoder's product leaves them, or in three with padded rows), written into a NaN-filled
/// output with padded rows, against polyattn::attention on the Reference executor.
template <class KeyMaskT = PrefixMask>
void check_device_attention(int n, int n_keys, AttentionHeads heads, Mask mask, bool packed,
                            exec::Cuda::Kernel kernel = exec::Cuda::Kernel::automatic) {
  std::mt19937 rng(std::uint32_t(n * 31 + n_keys));
  const int dh = heads.head_dim, dv = heads.value_dim != 0 ? heads.value_dim : dh;
  const int qw = heads.query_heads * dh, kw = heads.kv_heads * dh, vw = heads.kv_heads * dv, ow = heads.query_heads * dv;
  const RowMatrixXf q = random_matrix(n, qw, rng), k = random_matrix(n_keys, kw, rng), v = random_matrix(n_keys, vw, rng);
  RowMatrixXf want(n, ow);
  exec::Reference reference;
  attention<KeyMaskT>(reference, q, k, v, heads, mask, want);

  // Host images of the device matrices: [q | k | v] in one (packed, n == n_keys), else each with
  // 3 columns of padding; the output with 5.
  const auto upload = [](const RowMatrixXf& m, exec::cuda::DeviceBuffer<float>& buffer) {
    buffer.reserve(std::size_t(std::max<Eigen::Index>(1, m.size())));
    POLYATTN_CUDA_CHECK(cudaMemcpy(buffer.data(), m.data(), std::size_t(m.size()) * sizeof(float), cudaMemcpyHostToDevice));
    return buffer.data();
  };
  exec::cuda::DeviceBuffer<float> packed_buffer, q_buffer, k_buffer, v_buffer, out_buffer;
  using Rows = exec::Cuda::DeviceRows<const float>;
  Rows dq, dk, dv_rows;
  if (packed) {
    REQUIRE(n == n_keys);
    RowMatrixXf qkv(n, qw + kw + vw);
    qkv << q, k, v;
    const float* d = upload(qkv, packed_buffer);
    dq = {d, qkv.cols()};
    dk = {d + qw, qkv.cols()};
    dv_rows = {d + qw + kw, qkv.cols()};
  } else {
    const auto padded = [](const RowMatrixXf& m) {
      RowMatrixXf p = RowMatrixXf::Constant(m.rows(), m.cols() + 3, 7.0f);
      p.leftCols(m.cols()) = m;
      return p;
    };
    const RowMatrixXf pq = padded(q), pk = padded(k), pv = padded(v);
    dq = {upload(pq, q_buffer), pq.cols()};
    dk = {upload(pk, k_buffer), pk.cols()};
    dv_rows = {upload(pv, v_buffer), pv.cols()};
  }
  const std::int64_t out_stride = ow + 5;
  out_buffer.reserve(std::size_t(n) * std::size_t(out_stride));
  POLYATTN_CUDA_CHECK(cudaMemset(out_buffer.data(), 0xff, std::size_t(n) * std::size_t(out_stride) * sizeof(float)));  // NaN
  exec::Cuda cuda;
  cuda.set_kernel(kernel);
  cuda.attention<KeyMaskT>(dq, dk, dv_rows, {out_buffer.data(), out_stride}, n, n_keys, heads, mask);
  RowMatrixXf got(n, ow);
  POLYATTN_CUDA_CHECK(cudaMemcpy2D(got.data(), std::size_t(ow) * sizeof(float), out_buffer.data(), std::size_t(out_stride) * sizeof(float),
                                   std::size_t(ow) * sizeof(float), std::size_t(n), cudaMemcpyDeviceToHost));
  INFO("n ", n, " n_keys ", n_keys, mask == Mask::full ? " full" : " causal", " heads ", heads.query_heads, "/", heads.kv_heads, " x ",
       dh, packed ? " packed" : "", kernel == exec::Cuda::Kernel::simple_prefill ? " (simple prefill kernel)" : "");
  CHECK(max_abs_diff(got, want) <= fp32_attention_tolerance(dh, std::max(1, n_keys)));
  // Nothing written past a row's end: the padding columns are still NaN.
  std::vector<float> padded(std::size_t(n) * std::size_t(out_stride));
  POLYATTN_CUDA_CHECK(cudaMemcpy(padded.data(), out_buffer.data(), padded.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int written_padding = 0;
  for (int r = 0; r < n; ++r)
    for (std::int64_t c = ow; c < out_stride; ++c) written_padding += !std::isnan(padded[std::size_t(r * out_stride + c)]);
  CHECK(written_padding == 0);
}

}  // namespace

TEST_CASE("cuda: attention over device matrices matches polyattn::attention on the Reference executor" * doctest::skip(kNoDevice)) {
  // The Whisper encoder's shape (6 heads of 64, q, k, v side by side in one product's output) at
  // the lengths #13 names, on both prefill kernels.
  for (int n : {1, 2, 63, 64, 65, 257, 1500})
    for (Mask mask : {Mask::full, Mask::causal}) {
      check_device_attention(n, n, {6, 6, 64}, mask, true);
      check_device_attention(n, n, {6, 6, 64}, mask, true, exec::Cuda::Kernel::simple_prefill);
    }
  // GQA with values narrower than keys; rows as the last of more keys (a chunk after cached ones),
  // and more rows than keys (the first 30 see nothing: zeros); a sliding window.
  check_device_attention(100, 100, {8, 2, 40, 0.0f, 24}, Mask::causal, false);
  check_device_attention(40, 100, {4, 4, 32}, Mask::causal, false);
  check_device_attention(70, 40, {4, 4, 32}, Mask::causal, false);
  check_device_attention(100, 40, {4, 4, 32}, Mask::causal, false);  // the first block's rows all see nothing
  check_device_attention(100, 40, {4, 4, 32}, Mask::causal, false, exec::Cuda::Kernel::simple_prefill);
  check_device_attention(1500, 100, {2, 2, 32}, Mask::causal, false);  // tokens split into chunks, 1400 rows see nothing
  check_device_attention(1500, 100, {2, 2, 32}, Mask::causal, false, exec::Cuda::Kernel::simple_prefill);
  check_device_attention(70, 40, {4, 4, 32}, Mask::full, false);
  check_device_attention<SlidingWindow<48>>(257, 257, {6, 6, 64}, Mask::causal, true);
  check_device_attention<SlidingWindow<48>>(257, 257, {6, 6, 64}, Mask::causal, true, exec::Cuda::Kernel::simple_prefill);

  exec::Cuda cuda;
  exec::cuda::DeviceBuffer<float> buffer;
  buffer.reserve(1 << 16);
  const exec::Cuda::DeviceRows<const float> rows{buffer.data(), 600};
  CHECK_THROWS_WITH_AS(cuda.attention(rows, rows, rows, {buffer.data(), 600}, 4, 4, {2, 2, 300}, Mask::full), doctest::Contains("at most 256"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(cuda.attention(rows, {buffer.data(), 100}, rows, {buffer.data(), 600}, 4, 4, {2, 2, 64}, Mask::full),
                       doctest::Contains("narrower than its row"), ShapeError);
}

TEST_CASE("cuda: a NaN key gives NaN on the prefill kernel, also beside keys a row does not see" * doctest::skip(kNoDevice)) {
  // Token 0's key is NaN in head 0: every row sees it, so head 0's outputs are NaN on Reference
  // (core/attend.hpp); row 0 sees nothing else, the case a max that drops NaN turned into 0.
  // Head 1's outputs stay finite and equal.
  const std::vector<TensorSpec> tensors{{2, 16}, {2, 16}};
  const AttendSpec spec = attend_spec(2, 1, 0, 0, 16, 1, 0, 16);
  CacheStore<Nhd, float> store(tensors, {.max_sequences = 1, .capacity = 48, .poison_unused = true});
  const int seq = store.open();
  store.grow(seq, 40);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int t = 0; t < 2; ++t)
    for (int token = 0; token < 40; ++token)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 16; ++i) store.row(t, seq, token, h)[i] = dist(rng);
  store.row(0, seq, 0, 0)[3] = NAN;
  std::vector<float> q(40 * 32), got(40 * 32, 0.0f), want(40 * 32, 0.0f);
  for (float& x : q) x = dist(rng);
  std::vector<QueryJob> jobs_cuda, jobs_ref;
  for (int i = 0; i < 40; ++i) {
    jobs_cuda.push_back({seq, i + 1, q.data() + i * 32, got.data() + i * 32});
    jobs_ref.push_back({seq, i + 1, q.data() + i * 32, want.data() + i * 32});
  }
  exec::Reference().attend(std::as_const(store), spec, jobs_ref);
  for (const auto kernel : {exec::Cuda::Kernel::automatic, exec::Cuda::Kernel::simple_prefill}) {
    CAPTURE(int(kernel));
    exec::Cuda cuda;
    cuda.set_kernel(kernel);
    cuda.attend(std::as_const(store), spec, jobs_cuda);
    int nan_mismatch = 0;
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      REQUIRE(std::isnan(want[i]) == (i % 32 < 16));  // the oracle: head 0 NaN, head 1 finite
      if (std::isnan(got[i]) != std::isnan(want[i])) ++nan_mismatch;
      else if (!std::isnan(want[i])) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    }
    CHECK(nan_mismatch == 0);
    CHECK(worst <= fp32_attention_tolerance(16, 40));
  }
}

TEST_CASE("cuda: unsupported specs are refused with a clear error" * doctest::skip(kNoDevice)) {
  CacheStore<Nhd, float> store(std::vector<TensorSpec>{{1, 4096}}, {.max_sequences = 1, .capacity = 4});
  const int seq = store.open();
  store.grow(seq, 1);
  std::vector<float> q(4096), out(4096);
  const QueryJob job{seq, 1, q.data(), out.data()};
  exec::Cuda cuda;
  CHECK_THROWS_WITH_AS(cuda.attend(std::as_const(store), attend_spec(1, 1, 0, 0, 4096, 0, 0, 8), std::span(&job, 1)),
                       doctest::Contains("key_dim 4096"), ShapeError);
  CHECK_THROWS_WITH_AS(cuda.attend(std::as_const(store), attend_spec(1, 1, 0, 4000, 100, 0, 0, 8), std::span(&job, 1)),
                       doctest::Contains("do not fit a cached row of 4096"), ShapeError);
}

// Host-only: these run with or without a GPU.

TEST_CASE("cuda: without a device the executor throws CudaError naming the call") {
  if (!kNoDevice) return;  // only meaningful where there is no device
  CHECK_THROWS_WITH_AS(exec::Cuda{}, doctest::Contains("cudaGetDeviceCount"), CudaError);
}

TEST_CASE("cuda: chunk plans cover every token and give every SM work") {
  using exec::cuda::plan_chunks;
  for (int sms : {1, 108, 132})
    for (int jobs : {1, 3, 64, 5000})
      for (int heads : {1, 8, 32})
        for (int visible : {1, 63, 64, 65, 4096, 65536, 1 << 24}) {
          const auto plan = plan_chunks(jobs, heads, visible, sms);
          INFO("sms ", sms, " jobs ", jobs, " heads ", heads, " visible ", visible);
          CHECK(plan.chunk_tokens % exec::cuda::kTileTokens == 0);
          CHECK(std::int64_t(plan.chunk_tokens) * plan.max_chunks >= visible);
          CHECK(std::int64_t(plan.chunk_tokens) * (plan.max_chunks - 1) < visible);
          CHECK(plan.max_chunks <= exec::cuda::kMaxGridYZ);
          if (std::int64_t(jobs) * heads >= std::int64_t(exec::cuda::kBlocksPerSm) * sms) CHECK(plan.max_chunks == 1);
        }
  // One long sequence is split to fill the machine (to within the rounding to whole tiles).
  CHECK(plan_chunks(1, 8, 65536, 132).max_chunks * 8 >= exec::cuda::kBlocksPerSm * 132 / 2);
}

TEST_CASE("cuda: CudaError carries the call and the runtime's message") {
  const CudaError e("cudaMalloc(1024 bytes)", cudaErrorMemoryAllocation);
  CHECK(std::string(e.what()).find("cudaMalloc(1024 bytes) failed: cudaErrorMemoryAllocation") != std::string::npos);
  CHECK(e.code() == cudaErrorMemoryAllocation);
  const Error& base = e;  // catchable as any polyattn error
  CHECK(std::string(base.what()).find("out of memory") != std::string::npos);
}
