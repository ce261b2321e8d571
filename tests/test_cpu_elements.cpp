// 16-bit and int8 caches on the CpuSimd executor: Attention<V, L, exec::CpuSimd, T> for T =
// Eigen::half, Eigen::bfloat16 and std::int8_t against exec::Reference over the *same* cache (both
// read exactly the rounded values: CpuSimd converts them to fp32 right after the load, or decodes
// an int8 tile to fp32 with decode_at's products, and sums in fp32, Reference in double), so the
// difference is the fp32 summation error alone:
//  - Mha, Gqa<2>, Mqa: q, k, v in [-1, 1] (rounding keeps them there; int8's decode within
//    2^-24 of it), fp32_attention_tolerance.
//  - SlimK2, XCache: a converted layer (support/mha_layer.hpp), executor_tolerance, with the key
//    and value norms it measures on the unrounded rows raised by norm_growth for the rounding.
// int8 also on the AVX2 kernels of an AVX-512 build.
// NaN-poisoned unused capacity, ragged batches (one sequence long enough to be split across
// threads), head dims that are not a multiple of 16, page boundaries (Paged<16>). And the vector
// loads themselves, on the default kernels and (on an AVX-512 build) the AVX2 ones, over every
// 16-bit pattern.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/convert/x_cache.hpp>
#include <polyattn/polyattn.hpp>
#include <polyattn/variants/mtla.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
#include "support/executor_tolerance.hpp"
#include "support/mha_layer.hpp"
#include "support/rounded_cache.hpp"
#include "support/sanitizers.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

/// Prefills sequences of ragged lengths, then decodes them together; returns every output row
/// stacked (prefill rows, then each step's batch). Same rng seed -> same inputs for both executors.
template <class A>
RowMatrixXf ragged_prefill_then_decode(AttentionShape shape) {
  using V = typename A::variant_type;
  const int kv_width = V::kv_heads(shape) * shape.head_dim, q_width = shape.query_width();
  std::mt19937 rng(31 + shape.head_dim);
  A attn(shape, {.max_sequences = 3, .capacity = 310, .poison_unused = true}, {}, 2);
  std::vector<int> seqs;
  std::vector<RowMatrixXf> outs;
  for (int length : {300, 1, 13}) {  // 300: split across the two threads
    const int seq = attn.open_sequence();
    seqs.push_back(seq);
    RowMatrixXf q = random_matrix(length, q_width, rng), k = random_matrix(length, kv_width, rng), v = random_matrix(length, kv_width, rng);
    outs.emplace_back(length, q_width);
    attn.prefill(seq, q, {k, v}, Mask::causal, outs.back());
  }
  std::reverse(seqs.begin(), seqs.end());
  for (int step = 0; step < 3; ++step) {
    RowMatrixXf q = random_matrix(3, q_width, rng), k = random_matrix(3, kv_width, rng), v = random_matrix(3, kv_width, rng);
    outs.emplace_back(3, q_width);
    attn.decode(seqs, q, {k, v}, outs.back());
  }
  Eigen::Index rows = 0;
  for (const RowMatrixXf& o : outs) rows += o.rows();
  RowMatrixXf all(rows, q_width);
  rows = 0;
  for (const RowMatrixXf& o : outs) {
    all.middleRows(rows, o.rows()) = o;
    rows += o.rows();
  }
  return all;
}

template <class V, class L, class T, class E>
void check_kv_sharing_variant() {
  for (int head_dim : {17, 64, 72}) {
    const AttentionShape shape{6, head_dim};
    const RowMatrixXf cpu = ragged_prefill_then_decode<Attention<V, L, E, T>>(shape);
    const RowMatrixXf ref = ragged_prefill_then_decode<Attention<V, L, exec::Reference, T>>(shape);
    INFO(Attention<V, L, E, T>::name(), " ", sizeof(T) * 8, "-bit cache, head_dim ", head_dim);
    CHECK(max_abs_diff(cpu, ref) <= fp32_attention_tolerance(head_dim, 303));
  }
}

template <class V, class L, class T, class E>
void check_converted_variant() {
  // Heads of 20 (input width 120: neither a multiple of 16), and for SlimK2 heads of 64 (Whisper
  // tiny's: its slices take their own score pass on AVX2, lone_head_slices). Not under
  // AddressSanitizer: there (this file at -O0) the 384-wide layers took the test from 40 s to 183 s
  // in CI's dev pass, with XCache's; test_decode_tile runs the slices' pass under the sanitizers.
  std::vector<AttentionShape> shapes{{6, 20}};
  if (std::is_same_v<V, SlimK2> && !kUnderAddressSanitizer) shapes.push_back({6, 64});
  for (const AttentionShape shape : shapes) {
    std::mt19937 rng(23);
    const LayerModel m = random_layer_model(shape, 10.0, rng);
    const Script s = Script::random(shape.input_width(), rng, 4, 0.0, 1);  // sequence b: one token
    Attention<V, L, E, T> cpu(shape, script_cache(), params_for<V>(m), 2);
    Attention<V, L, exec::Reference, T> ref(shape, script_cache(), params_for<V>(m), 2);
    const double growth = norm_growth<T>(std::max(shape.input_width(), shape.query_width()));
    const double tol = executor_tolerance<V>(m, s, script_cache().capacity) * growth * growth;
    INFO(decltype(cpu)::name(), " ", sizeof(T) * 8, "-bit cache, heads of ", shape.head_dim);
    CHECK(max_abs_diff(run_script(cpu, m, s), run_script(ref, m, s)) <= tol);
  }
}

#if XSIMD_WITH_AVX512F && XSIMD_WITH_FMA3_AVX2
using Avx2Kernels = exec::BasicCpuSimd<xsimd::fma3<xsimd::avx2>>;
/// int8 on the AVX2 kernels (8 lanes, the 8-code load), one combo per variant on one layout (page
/// boundaries): the kernels are instantiated per cache store, and each costs build time.
#define POLYATTN_CPU_AVX2_INT8_COMBOS                                                                             \
  , Combo<Mha, Paged<16>, Avx2Kernels, std::int8_t>, Combo<Gqa<2>, Paged<16>, Avx2Kernels, std::int8_t>,        \
      Combo<Mqa, Paged<16>, Avx2Kernels, std::int8_t>, Combo<SlimK2, Paged<16>, Avx2Kernels, std::int8_t>,      \
      Combo<XCache, Paged<16>, Avx2Kernels, std::int8_t>
#else
#define POLYATTN_CPU_AVX2_INT8_COMBOS
#endif

/// check(Arch{}) for the default kernels and, on an AVX-512 build, the AVX2 ones.
template <class Check>
void on_both_kernels(const Check& check) {
  check(xsimd::default_arch{});
#if XSIMD_WITH_AVX512F && XSIMD_WITH_FMA3_AVX2
  check(xsimd::fma3<xsimd::avx2>{});
#endif
}

}  // namespace

TEST_CASE_TEMPLATE("CpuSimd over a 16-bit or int8 cache matches Reference over the same cache", C,
                   POLYATTN_ELEMENT_COMBOS(Mha, exec::CpuSimd), POLYATTN_ELEMENT_COMBOS(Gqa<2>, exec::CpuSimd),
                   POLYATTN_ELEMENT_COMBOS(Mqa, exec::CpuSimd), POLYATTN_ELEMENT_COMBOS(SlimK2, exec::CpuSimd),
                   POLYATTN_ELEMENT_COMBOS(XCache, exec::CpuSimd) POLYATTN_CPU_AVX2_INT8_COMBOS) {
  using V = typename C::variant;
  if constexpr (std::is_same_v<V, SlimK2> || std::is_same_v<V, XCache>)
    check_converted_variant<V, typename C::layout, typename C::element, typename C::executor>();
  else
    check_kv_sharing_variant<V, typename C::layout, typename C::element, typename C::executor>();
}

// The loads under both kernels' conversions (exec/cpu/load_floats.hpp: vcvtph2ps or the
// bfloat16 shift, 16 lanes on AVX-512, 8 on AVX2) agree with the scalar decode_element for every
// 16-bit pattern: NaNs stay NaN, everything else bit for bit.
TEST_CASE_TEMPLATE("CpuSimd's 16-bit loads decode every bit pattern as decode_element does", T, Eigen::half, Eigen::bfloat16) {
  std::vector<T> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = Eigen::numext::bit_cast<T>(static_cast<std::uint16_t>(i));
  const auto check = [&]<class Arch>(Arch) {
    INFO(Arch::name());
    constexpr std::size_t W = xsimd::batch<float, Arch>::size;
    alignas(64) float got[W];
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < all.size(); i += W) {
      exec::cpu::load_floats<Arch>(all.data() + i).store_aligned(got);
      for (std::size_t l = 0; l < W; ++l) {
        const float want = decode_element(all[i + l]);
        if (std::isnan(want) ? !std::isnan(got[l]) : Eigen::numext::bit_cast<std::uint32_t>(want) != Eigen::numext::bit_cast<std::uint32_t>(got[l]))
          ++wrong;
      }
    }
    CHECK(wrong == 0);
  };
  on_both_kernels(check);
}

// The int8 loads (8-bit codes sign-extended and converted to fp32, exec/cpu/load_floats.hpp) on
// both kernels give float(code) for every code, and the tile decode (int8_tile.hpp) gives
// decode_at's values bit for bit, segment boundaries inside a vector and scalar tails included.
TEST_CASE("CpuSimd's int8 loads and tile decode give decode_at's values") {
  std::vector<std::int8_t> codes(256 + 64);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = std::int8_t(int(i % 256) - 128);
  std::mt19937 rng(3);
  const RowMatrixXf x = random_matrix(5, 37, rng, 4.0f);
  const RowScales layout = int8_row(37, 10);  // segments of 10, 10, 10 and 7
  std::vector<std::int8_t> rows(std::size_t(5 * (layout.stored_elements() + 3)));  // stride: the row plus 3
  const std::ptrdiff_t stride = layout.stored_elements() + 3;
  for (int r = 0; r < 5; ++r) encode_row(rows.data() + r * stride, x.row(r).data(), 37, 10);
  const auto check = [&]<class Arch>(Arch) {
    INFO(Arch::name());
    constexpr std::size_t W = xsimd::batch<float, Arch>::size;
    alignas(64) float got[W];
    std::size_t wrong = 0;
    for (std::size_t i = 0; i + W <= codes.size(); i += W) {
      exec::cpu::load_floats<Arch>(codes.data() + i).store_aligned(got);
      for (std::size_t l = 0; l < W; ++l) wrong += got[l] != float(codes[i + l]);
    }
    CHECK(wrong == 0);
    std::vector<float> decoded(5 * 37);
    exec::cpu::decode_int8_rows<Arch>(rows.data(), stride, 5, layout, decoded.data());
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 37; ++c) wrong += decoded[std::size_t(r * 37 + c)] != decode_at(rows.data() + r * stride, c, layout);
    CHECK(wrong == 0);
  };
  on_both_kernels(check);
}

// A value row holding inf has a NaN scale in an int8 cache. The decode kernel folds scales into
// the weights, so a token the mask drops would still multiply its NaN scale in: it must not. With
// MTLA's stride mask of 3, token 97 is seen by row 97 alone (it does not close a slot), so rows 98
// and 99, decoded after it, must match Reference, and row 97 is NaN on both.
TEST_CASE("int8 decode: a non-finite value row changes only the rows that see it") {
  const AttentionShape shape{2, 64};
  const CacheConfig config{.max_sequences = 1, .capacity = 128, .poison_unused = true};
  Attention<Mha, Hnd, exec::CpuSimd, std::int8_t, MtlaStrideMask<3>> cpu(shape, config, {}, 2);
  Attention<Mha, Hnd, exec::Reference, std::int8_t, MtlaStrideMask<3>> ref(shape, config);
  std::mt19937 rng(12);
  const RowMatrixXf q = random_matrix(100, 128, rng), k = random_matrix(100, 128, rng);
  RowMatrixXf v = random_matrix(100, 128, rng);
  v(97, 3) = std::numeric_limits<float>::infinity();
  const auto run = [&](auto& attn) {
    const int seq = attn.open_sequence();
    RowMatrixXf out(100, 128);
    attn.prefill(seq, q.topRows(97), {k.topRows(97), v.topRows(97)}, Mask::causal, out.topRows(97));
    const int seqs[] = {seq};
    for (Eigen::Index t = 97; t < 100; ++t) {
      RowMatrixXf y(1, 128);
      attn.decode(seqs, q.row(t), {k.row(t), v.row(t)}, y);
      out.row(t) = y;
    }
    return out;
  };
  const RowMatrixXf y_cpu = run(cpu), y_ref = run(ref);
  CHECK(std::isnan(y_cpu(97, 3)));
  CHECK(std::isnan(y_ref(97, 3)));
  CHECK(max_abs_diff(RowMatrixXf(y_cpu.bottomRows(2)), RowMatrixXf(y_ref.bottomRows(2))) <= fp32_attention_tolerance(64, 100));
  CHECK(max_abs_diff(RowMatrixXf(y_cpu.topRows(97)), RowMatrixXf(y_ref.topRows(97))) <= fp32_attention_tolerance(64, 100));
}

TEST_CASE_TEMPLATE("decode tiles span the pages of Paged<16>: the same bits as Hnd's tiles", T, Eigen::half, std::int8_t) {
  // One thread, so no sequence is split into chunks: both layouts then cut each sequence into the
  // same tiles of kTile rows (a tile of Paged<16> gathers 4 pages), and every sum is taken in the
  // same order. With a tile per page, Paged<16> took other online-softmax steps than Hnd and its
  // outputs differed in the last bits. Float and 16-bit MHA and GQA take such a tile's passes
  // page by page, head after head (attend_chunk): each head still adds the tile's rows in order.
  const auto decode = [](auto layout, auto variant) {
    using L = typename decltype(layout)::type;
    using V = typename decltype(variant)::type;
    const AttentionShape shape{6, 64};
    const int kv_width = V::kv_heads(shape) * shape.head_dim, q_width = shape.query_width();
    Attention<V, L, exec::CpuSimd, T> attn(shape, {.max_sequences = 4, .capacity = 300, .poison_unused = true}, {}, 1);
    std::mt19937 rng(5);
    std::vector<int> seqs;
    for (int length : {1, 17, 100, 300}) {
      const int seq = attn.open_sequence();
      const RowMatrixXf k = random_matrix(length, kv_width, rng), v = random_matrix(length, kv_width, rng);
      attn.append(seq, {k, v});
      seqs.push_back(seq);
    }
    const RowMatrixXf q = random_matrix(4, q_width, rng);
    RowMatrixXf out(4, q_width);
    attn.attend(seqs, q, out);
    return out;
  };
  const std::type_identity<Paged<16>> paged;
  const std::type_identity<Hnd> hnd;
  CHECK((decode(paged, std::type_identity<Mha>{}).array() == decode(hnd, std::type_identity<Mha>{}).array()).all());
  CHECK((decode(paged, std::type_identity<Gqa<2>>{}).array() == decode(hnd, std::type_identity<Gqa<2>>{}).array()).all());
  CHECK((decode(paged, std::type_identity<Mqa>{}).array() == decode(hnd, std::type_identity<Mqa>{}).array()).all());
}
