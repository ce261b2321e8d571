// The two products of a query-block tile (prefill): the m query vectors of a block against n <=
// kTile cached rows of one cache head. Scores are kept key-major, st[j][i] (key j, query vector
// i), so that the softmax bookkeeping runs across query vectors in SIMD lanes and the keys are
// read in place, row after row, as stored:
//   score_block:      st[j][i]  = key_j . q_i       qt: the block's queries transposed once per block
//   accumulate_weights (decode_tile.hpp, shared with decode): acc[i][:] += sum_j st[j][i] value_j
// Both are register-blocked: score_keys holds NR keys x NC vectors of query lanes,
// accumulate_weights NG query vectors x NC vectors of value columns. T: the cache element (float, half, bfloat16),
// converted to fp32 as it is read.
#pragma once

#include <algorithm>
#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "polyattn/exec/cpu/decode_tile.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"
#include "polyattn/exec/cpu/softmax_exp.hpp"

namespace polyattn::exec::cpu {

/// st[r * st_stride + c ..] for NR keys (row r at keys + r * key_stride) against NC vectors of
/// query lanes from column c of qt (qt[d * qt_stride + i] = q_i[d]). Each step over the key
/// dimension loads NC query vectors and broadcasts NR key elements. `lane_max` (if not null):
/// raised to each lane's largest score of these keys (while they are still in registers, so that
/// the softmax need not read the tile once more for its max; a NaN may or may not pass).
/// `shift` (if not null, with lane_max and lane_sum): the weights exp(score - shift[lane]) are
/// stored instead of the scores, and their sum is added to lane_sum (the softmax's exp taken
/// while the scores are in registers: attend_block.hpp, fused tiles).
/// Registers: NR*NC accumulators + NC + 1.
template <class Arch, int NR, int NC, class T>
void score_keys(const T* keys, std::ptrdiff_t key_stride, int dim, const float* qt, std::ptrdiff_t qt_stride, int c, float* st,
                std::ptrdiff_t st_stride, float* lane_max, const float* shift, float* lane_sum) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  B acc[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NC; ++v) acc[r][v] = B(0.0f);
  for (int d = 0; d < dim; ++d) {
    B q[NC];
    for (int v = 0; v < NC; ++v) q[v] = B::load_unaligned(qt + std::ptrdiff_t(d) * qt_stride + c + v * W);
    for (int r = 0; r < NR; ++r) {
      const B k(decode_element(keys[r * key_stride + d]));
      for (int v = 0; v < NC; ++v) acc[r][v] = xsimd::fma(k, q[v], acc[r][v]);
    }
  }
  if (lane_max)
    for (int v = 0; v < NC; ++v) {
      B m = B::load_unaligned(lane_max + c + v * W);
      for (int r = 0; r < NR; ++r) m = xsimd::max(m, acc[r][v]);
      m.store_unaligned(lane_max + c + v * W);
    }
  if (shift) {
    for (int v = 0; v < NC; ++v) {
      const B by = B::load_unaligned(shift + c + v * W);
      B sum = B::load_unaligned(lane_sum + c + v * W);
      for (int r = 0; r < NR; ++r) {
        acc[r][v] = softmax_exp<Arch>(acc[r][v] - by);
        sum += acc[r][v];
      }
      sum.store_unaligned(lane_sum + c + v * W);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NC; ++v) acc[r][v].store_unaligned(st + r * st_stride + c + v * W);
}

/// st[j * st_stride + c0 + i] = key_j . q_i for the n keys (key j at keys + j * key_stride) and
/// the `lanes` query vectors of qt from column c0 (a multiple of W); `lane_max` (if not null, from
/// c0 on): raised to each lane's largest score. `shift` and `lane_sum` (if not null, from c0 on,
/// with lane_max): st holds exp(score - shift[i]) instead, and lane_sum[i] gains their sum.
template <class Arch, class T>
void score_block(const T* keys, std::ptrdiff_t key_stride, int n, int dim, const float* qt, std::ptrdiff_t qt_stride, int c0,
                 int lanes, float* st, std::ptrdiff_t st_stride, float* lane_max = nullptr, const float* shift = nullptr,
                 float* lane_sum = nullptr) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  constexpr bool wide = kVectorRegisters<Arch> == 32;
  // Keys x vectors of query lanes per register block: 8 x 3 + 3 + 1 = 28 of 32 registers, which
  // divides a 64-key tile without a remainder (6 x 4 left 4 keys to a slower 1 x 4 pass; 8 x 3
  // ran 2-3% faster at 1500 tokens on the Xeon). AVX2's 16 registers: 4 x 3 + 3 + 1 = 16, 7
  // loads (3 query vectors, 4 key broadcasts) for 12 FMAs where 2 x 4 + 4 + 1 = 13 loaded 6 for 8.
  // With the value product's 6 x 2 (decode_tile.hpp, kBlockValueColumns), on an AMD EPYC Zen 3
  // (AVX2), 2 threads, 6 heads of 64, against the 2 x 4 blocks before, alternated runs (a noisy VM: best
  // of 3): 1500 tokens full 46-50 ms against 50-54, causal 23-25 against 31-34; 448 full 3.9-4.3
  // against 4.6-5.6; 4096 causal 140-178 against 209-235.
  constexpr int kKeys = wide ? 8 : 4;
  constexpr int kVectors = 3;
  const int vectors = (lanes + W - 1) / W;
  // Whole register blocks, then one key or one vector at a time: 4 instantiations per element
  // type rather than every (keys, vectors) pair, which compile time (sanitizer builds above all)
  // pays for in every translation unit that uses CpuSimd.
  const auto key_rows = [&](auto nc, int c) {
    constexpr int NC = decltype(nc)::value;
    int j = 0;
    for (; j + kKeys <= n; j += kKeys)
      score_keys<Arch, kKeys, NC>(keys + j * key_stride, key_stride, dim, qt, qt_stride, c, st + j * st_stride, st_stride, lane_max, shift, lane_sum);
    for (; j < n; ++j)
      score_keys<Arch, 1, NC>(keys + j * key_stride, key_stride, dim, qt, qt_stride, c, st + j * st_stride, st_stride, lane_max, shift, lane_sum);
  };
  int v = 0;
  for (; v + kVectors <= vectors; v += kVectors) key_rows(std::integral_constant<int, kVectors>{}, c0 + v * W);
  for (; v < vectors; ++v) key_rows(std::integral_constant<int, 1>{}, c0 + v * W);
}

}  // namespace polyattn::exec::cpu
