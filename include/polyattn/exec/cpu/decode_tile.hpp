// The two register-blocked halves of a decode tile: up to kTile consecutive cached rows of one
// cache head, read for all G query heads of its group at once.
//   score_tile:      scores[g][j] = q_g . key_j(g)        (G x n, no horizontal sum per token)
//   accumulate_tile: acc[g][:]   += sum_j p[g][j] value_j  (G x value_dim, accumulators in registers)
// Both are templates on the xsimd architecture and on the cache element type T (float, half,
// bfloat16: converted to fp32 right after the load, see load_floats.hpp; int8: the codes, their
// scales applied by the caller to the scores and, in accumulate_int8_tile, to the weights).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "polyattn/core/row_scales.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"

namespace polyattn::exec::cpu {

/// Tokens per tile: one softmax rescale and one vectorised exp per head per tile. A multiple of
/// every SIMD width. Fewer rows for wide rows (so that a tile stays in L1 between its score and
/// value passes: 16 rows of XCache's 1536-byte row) ran 1.1-1.2x slower on SlimK2 and XCache.
inline constexpr int kTile = 64;

/// Vector registers of the architecture: the register blocks below are sized to fit them.
template <class Arch>
inline constexpr int kVectorRegisters = std::is_base_of_v<xsimd::avx512f, Arch> ? 32 : 16;

/// Calls f(std::integral_constant<int, n>) for a runtime 1 <= n <= Max (larger n as Max).
template <int Max, int N = 1, class F>
inline void with_count(int n, F&& f) {
  if constexpr (N < Max) {
    if (n == N) return f(std::integral_constant<int, N>{});
    return with_count<Max, N + 1>(n, f);
  } else {
    f(std::integral_constant<int, Max>{});
  }
}

#if defined(__AVX512F__)
namespace detail {
/// One level of the AVX-512 transpose-and-add tree: u and v each hold 16 / S groups of S lanes
/// (one group per row being summed); the result holds twice as many groups of S / 2 lanes,
/// u's and v's groups interleaved, each the sum of its halves. Two-source permutes only.
template <int S>
inline __m512 fold_pair(__m512 u, __m512 v) {
  constexpr auto index = [](int half) {
    struct Lanes { int i[16]; } lanes{};
    for (int lane = 0; lane < 16; ++lane) {
      const int group = lane / (S / 2), offset = lane % (S / 2);
      lanes.i[lane] = (group / 2) * S + half * (S / 2) + offset + (group % 2) * 16;  // >= 16: from v
    }
    return lanes;
  };
  static constexpr auto low = index(0), high = index(1);
  const __m512i lo = _mm512_loadu_si512(low.i), hi = _mm512_loadu_si512(high.i);
  return _mm512_add_ps(_mm512_permutex2var_ps(u, lo, v), _mm512_permutex2var_ps(u, hi, v));
}
}  // namespace detail
#endif

/// Lane r of the result = the sum of the lanes of rows[r], r < W. On AVX-512 a tree of
/// two-source permutes (pairing rows r and r + half at each level puts the sums in row order):
/// 30 permutes and 15 adds per 16 rows. (xsimd 8.1's haddp permutes AVX-512 lanes wrongly.)
template <class Arch>
inline xsimd::batch<float, Arch> sum_each(const xsimd::batch<float, Arch>* rows) {
  using B = xsimd::batch<float, Arch>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    __m512 t8[8], t4[4], t2[2];
    for (int i = 0; i < 8; ++i) t8[i] = detail::fold_pair<16>(rows[i], rows[i + 8]);
    for (int i = 0; i < 4; ++i) t4[i] = detail::fold_pair<8>(t8[i], t8[i + 4]);
    for (int i = 0; i < 2; ++i) t2[i] = detail::fold_pair<4>(t4[i], t4[i + 2]);
    return B(detail::fold_pair<2>(t2[0], t2[1]));
  } else  // an else, not a fall-through: nvcc warns that code after the return is unreachable
#endif
  {
    alignas(64) float sums[B::size];
    for (std::size_t r = 0; r < B::size; ++r) sums[r] = xsimd::hadd(rows[r]);
    return B::load_aligned(sums);
  }
}

/// Asks for `bytes` bytes from `row`, a line at a time, into L2 only (prefetcht2): a tile of
/// XCache rows is 96 KiB, more than L1, and prefetches into L1 (prefetcht0) ran 1.1-1.2x slower,
/// L2 ones 1.15-1.25x faster on SlimK2 and XCache (AMD EPYC Zen 4, DRAM-resident caches).
inline void prefetch_bytes(const char* row, int bytes) {
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 1);
}

/// Where a tile's key rows are and how the group reads them.
template <class T>
struct KeyTile {
  const T* rows;               // row j at rows + j * stride
  std::ptrdiff_t stride;
  std::ptrdiff_t group_stride; // head g reads its key at + g * group_stride (0: the group shares one key)
  int dim;                     // key_dim
  int count;                   // n <= kTile rows
  // The next tile's rows, asked for while this tile's are scored (row j asks for the next tile's
  // row j, at next + j * stride): they then arrive while this tile's values are accumulated. That
  // overlaps memory and arithmetic when the values live in the key rows (SlimK2, XCache), and it
  // finds the next page of Paged<P>, which the hardware prefetchers cannot guess. (Asking for the
  // next tile's value rows of MHA/GQA as well was no faster, within this machine's noise. Kept as
  // plain fields: a build that held them in a member struct with an ask() method had no prefetch
  // instruction left at all (objdump; cause not found) and ran 1.3x slower on SlimK2 and XCache.)
  const char* next = nullptr;  // the next tile's first row (its first byte read)
  std::ptrdiff_t next_stride = 0;  // bytes between its rows
  int next_bytes = 0;          // bytes read per row
  int next_count = 0;          // rows of the next tile to ask for (0: nothing)
};

/// Scores of NG query heads (pre-scaled queries q[NG][dim], row stride q_stride) against the
/// rows of a tile, token after token: each row is read front to back once for the NG heads (one
/// key for all of them when the group shares it: MQA, GQA, XCache, MLA; else head g's slice at
/// g * group_stride: SlimK2's packed row). The W dot products of a W-block of tokens are reduced
/// together by sum_each: no horizontal sum per token. Rows are read in order because that is what
/// the hardware prefetchers follow: a register block of 8 rows read column-block by column-block
/// ran 1.3-1.5x slower on MHA and MQA with the cache in L3 or DRAM (AMD EPYC Zen 4), and one
/// head's slice across all rows of the tile, then the next head's, 1.4x slower on SlimK2.
/// Registers: NG accumulators + 1 key + 1 query.
template <class Arch, int NG, bool SharedKey, class T>
void score_rows(const float* q, std::ptrdiff_t q_stride, const KeyTile<T>& keys, float* scores) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  const int dim_vec = keys.dim / W * W;
  alignas(64) B partial[NG][W];
  for (int j0 = 0; j0 < keys.count; j0 += W) {
    const int m = std::min(W, keys.count - j0);
    for (int jj = 0; jj < W; ++jj) {  // rows past the tile repeat its last row: valid memory, scores unused
      const T* k = keys.rows + std::ptrdiff_t(std::min(j0 + jj, keys.count - 1)) * keys.stride;
      if (j0 + jj < keys.next_count) prefetch_bytes(keys.next + std::ptrdiff_t(j0 + jj) * keys.next_stride, keys.next_bytes);
      B acc[NG];
      for (int g = 0; g < NG; ++g) acc[g] = B(0.0f);
      if constexpr (SharedKey) {
        for (int c = 0; c < dim_vec; c += W) {
          const B kv = load_floats<Arch>(k + c);
          for (int g = 0; g < NG; ++g) acc[g] = xsimd::fma(B::load_unaligned(q + g * q_stride + c), kv, acc[g]);
        }
      } else {
        for (int g = 0; g < NG; ++g)
          for (int c = 0; c < dim_vec; c += W)
            acc[g] = xsimd::fma(B::load_unaligned(q + g * q_stride + c), load_floats<Arch>(k + g * keys.group_stride + c), acc[g]);
      }
      for (int g = 0; g < NG; ++g) partial[g][jj] = acc[g];
    }
    for (int g = 0; g < NG; ++g) sum_each<Arch>(partial[g]).store_unaligned(scores + g * kTile + j0);
    if (dim_vec < keys.dim)  // key dims past the last full vector: scalar (17, 40, 72, ...)
      for (int jj = 0; jj < m; ++jj) {
        const T* k = keys.rows + std::ptrdiff_t(j0 + jj) * keys.stride;
        for (int g = 0; g < NG; ++g) {
          const T* kg = k + (SharedKey ? 0 : g * keys.group_stride);
          float tail = 0.0f;
          for (int c = dim_vec; c < keys.dim; ++c) tail += q[g * q_stride + c] * element_value(kg[c]);
          scores[g * kTile + j0 + jj] += tail;
        }
      }
  }
}

/// scores[g][j] for all `group` heads (queries q[group][key_dim]), in blocks of up to 8 heads (4
/// on AVX2).
template <class Arch, class T>
void score_tile(const float* q, int group, const KeyTile<T>& keys, float* scores) {
  constexpr int kHeads = kVectorRegisters<Arch> == 32 ? 8 : 4;
  for (int g0 = 0; g0 < group; g0 += kHeads) {
    KeyTile<T> block = keys;
    block.rows += g0 * keys.group_stride;
    if (g0 > 0) block.next_count = 0;  // the first head block asked for the next tile
    with_count<kHeads>(std::min(kHeads, group - g0), [&](auto ng) {
      if (keys.group_stride == 0)
        score_rows<Arch, decltype(ng)::value, true>(q + g0 * keys.dim, keys.dim, block, scores + g0 * kTile);
      else
        score_rows<Arch, decltype(ng)::value, false>(q + g0 * keys.dim, keys.dim, block, scores + g0 * kTile);
    });
  }
}

/// Where weight (vector g, token j) of a tile is: decode's scores are [head][kTile], w[g * kTile
/// + j]; a prefill block's (attend_block.hpp) are [token][lanes], w[j * lanes + g]. Decode's stride
/// stays a compile-time constant: with a run-time one, one A/B had decode 3-5% slower (about this VM's noise).
template <bool ByToken>
struct WeightIndex {
  std::ptrdiff_t lanes = 0;  // ByToken only
  std::ptrdiff_t operator()(int g, int j) const { return ByToken ? j * lanes + g : std::ptrdiff_t(g) * kTile + j; }
};

/// acc[g][c .. c + NC*W) += sum_j w(g, j) row_j[c ..] for NG query vectors: NG x NC accumulators
/// stay in registers over the n rows, each row's NC vectors are loaded once for the NG vectors.
/// Registers: NG*NC accumulators + NC values + 1 weight.
template <class Arch, int NG, int NC, class T, bool ByToken>
void accumulate_columns(const float* w, WeightIndex<ByToken> at, const T* rows, std::ptrdiff_t stride, int n, float* acc,
                        int acc_stride, int c) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  B a[NG][NC];
  for (int g = 0; g < NG; ++g)
    for (int i = 0; i < NC; ++i) a[g][i] = B::load_unaligned(acc + g * acc_stride + c + i * W);
  for (int j = 0; j < n; ++j) {
    const T* r = rows + std::ptrdiff_t(j) * stride + c;
    B v[NC];
    for (int i = 0; i < NC; ++i) v[i] = load_floats<Arch>(r + i * W);
    for (int g = 0; g < NG; ++g) {
      const B x(w[at(g, j)]);
      for (int i = 0; i < NC; ++i) a[g][i] = xsimd::fma(x, v[i], a[g][i]);
    }
  }
  for (int g = 0; g < NG; ++g)
    for (int i = 0; i < NC; ++i) a[g][i].store_unaligned(acc + g * acc_stride + c + i * W);
}

/// acc[g][:] += sum_j w(g, j) row_j[:] for `m` query vectors (weight (g, j) at w[at(g, j)]),
/// row_j = rows + j * stride, `dim` columns, acc row stride `acc_stride` (0: dim). Column blocks
/// outside, vector blocks inside: a column block of the tile's rows stays in L1 while every vector
/// block reads it.
template <class Arch, class T, bool ByToken>
void accumulate_weights(const float* w, WeightIndex<ByToken> at, int m, const T* rows, std::ptrdiff_t stride, int n, float* acc,
                        int dim, int acc_stride = 0) {
  if (acc_stride == 0) acc_stride = dim;
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  constexpr int kVectors = kVectorRegisters<Arch> == 32 ? 6 : 2;  // 6 x 4 + 4 + 1 = 29 of 32 registers
  const auto columns = [&](auto nc, int c) {
    constexpr int NC = decltype(nc)::value;
    if constexpr (ByToken) {  // prefill blocks: whole register blocks, then one vector at a time (fewer instantiations)
      int g0 = 0;
      for (; g0 + kVectors <= m; g0 += kVectors)
        accumulate_columns<Arch, kVectors, NC>(w + at(g0, 0), at, rows, stride, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride, c);
      for (; g0 < m; ++g0)
        accumulate_columns<Arch, 1, NC>(w + at(g0, 0), at, rows, stride, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride, c);
    } else {  // decode: a group's heads in one pass over the tile's rows, however many
      for (int g0 = 0; g0 < m; g0 += kVectors)
        with_count<kVectors>(std::min(kVectors, m - g0), [&](auto ng) {
          accumulate_columns<Arch, decltype(ng)::value, NC>(w + at(g0, 0), at, rows, stride, n, acc + std::ptrdiff_t(g0) * acc_stride,
                                                            acc_stride, c);
        });
    }
  };
  int c = 0;
  for (; c + 4 * W <= dim; c += 4 * W) columns(std::integral_constant<int, 4>{}, c);
  for (; c + W <= dim; c += W) columns(std::integral_constant<int, 1>{}, c);
  for (; c < dim; ++c)  // columns past the last full vector
    for (int g = 0; g < m; ++g) {
      float a = acc[std::ptrdiff_t(g) * acc_stride + c];
      for (int j = 0; j < n; ++j) a += w[at(g, j)] * element_value(rows[std::ptrdiff_t(j) * stride + c]);
      acc[std::ptrdiff_t(g) * acc_stride + c] = a;
    }
}

/// Decode's value half: acc[g][:] += sum_j p[g][j] row_j[:] for the `group` heads, p[g][j] at
/// p[g * kTile + j].
template <class Arch, class T>
void accumulate_tile(const float* p, int group, const T* rows, std::ptrdiff_t stride, int n, float* acc, int dim) {
  accumulate_weights<Arch>(p, WeightIndex<false>{}, group, rows, stride, n, acc, dim);
}

/// Decode's value half over an int8 tile (rows of codes, their scales after them: `layout`):
/// acc[g][:] += sum_j p[g][j] scale_j(s) codes_j[:] per segment s of the row, the scale folded
/// into the weights (`w`: scratch of group * kTile floats), so the codes are read as they are.
template <class Arch>
void accumulate_int8_tile(const float* p, int group, const std::int8_t* rows, std::ptrdiff_t stride, int n, RowScales layout,
                          float* w, float* acc) {
  for (int s = 0; s < layout.segments(); ++s) {
    const int first = s * layout.segment, width = std::min(layout.segment, layout.codes - first);
    for (int j = 0; j < n; ++j) {
      const float scale = segment_scale(rows + std::ptrdiff_t(j) * stride, layout, s);
      for (int g = 0; g < group; ++g) w[g * kTile + j] = p[g * kTile + j] * scale;
    }
    accumulate_weights<Arch>(w, WeightIndex<false>{}, group, rows + first, stride, n, acc + first, width, layout.codes);
  }
}

}  // namespace polyattn::exec::cpu
