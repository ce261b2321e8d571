// The CPU prefill kernel: a block of query rows of one sequence, for one cache head, against
// that head's cached rows tile by tile (flash attention). The block's queries are transposed once;
// each tile's keys are then read in place, once for the whole block, and scored into a key-major
// tile (kTile keys x the block's query vectors, in L1: block_tile.hpp); one online-softmax step
// per tile runs across the query vectors in SIMD lanes (max, rescale, exp and sum, vertical: no
// horizontal reduction), then the weights times the tile's values. Keys are read once per block
// instead of once per query row, and both products are register-blocked micro-kernels.
// Row r of the block sees the tokens [first, end) of its key mask's range (core/key_mask.hpp;
// [0, visible) by default: causal, full or any other prefix), less those the mask drops, with the
// scores at the limits of the attend primitive (core/attend.hpp). Only the tiles some row sees
// are read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cpu/block_tile.hpp"
#include "polyattn/exec/cpu/decode_tile.hpp"
#include "polyattn/exec/cpu/int8_tile.hpp"
#include "polyattn/exec/cpu/kernels.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"
#include "polyattn/exec/cpu/scratch_floats.hpp"
#include "polyattn/exec/cpu/softmax_exp.hpp"

namespace polyattn::exec::cpu {

/// Query vectors per block (rows x group), when every row of the block sees the same keys (a
/// full mask). Each block reads every tile of its keys and values once (from L2 when a head's
/// rows of a long sequence fill more than L1), so larger blocks read them fewer times; the
/// block's scores (kTile x 240 floats = 60 KiB) then live in L2. Full-mask attention at 1500
/// tokens, 6 heads of 64, 2 threads of the Intel Xeon (bench_prefill): 64 vectors 18.1 ms, 144
/// 16.5, 192 16.3, 240 16.0, 288 16.3.
inline constexpr int kBlockVectors = 240;

/// Fused tiles (attend_block): a lane's max is moved to its tile's when that exceeds it by more
/// than this, so a weight stays below e^8 (about 3000: no sum of weights, or of weights times
/// values, comes nearer to overflow than a factor 3000 over the exact softmax's)...
inline constexpr float kRescaleAbove = 8.0f;
/// ...and a tile whose max exceeds a lane's by this much is scored again unfused: its weights,
/// up to e^64 each, could not have overflowed below that (64 of them sum to under 2^100).
inline constexpr float kFusedLimit = 64.0f;

/// Query rows per block of a run of `run_rows` rows; `uniform`: whether they all see the same
/// keys. When they do not (a causal mask), a block computes the scores of every tile some row of
/// it sees, and those its other rows do not see are wasted: about block / run of the work when
/// the run starts at token 0. So a ragged block is an eighth of the run, in whole multiples of
/// 48 vectors (3 x 16 lanes of score_block's register blocks, 8 x 6 of the value product's),
/// from 48 to kBlockVectors. Causal, 6 heads of 64, 2 Xeon threads, fixed 64 / fixed 240 / this:
/// 448 tokens 1.00 / 1.25 / 0.95 ms, 1500 9.6 / 9.4 / 9.2 ms, 4096 70 / 62.6 / 63.5 ms. When
/// the heads of a group read different slices of a row (SlimK), each head's rows fill whole
/// vectors of lanes.
template <class Arch>
int block_rows(const AttendSpec& spec, bool uniform, int run_rows) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  const int vectors = uniform ? kBlockVectors : std::clamp(run_rows * spec.group / 8 / 48 * 48, 48, kBlockVectors);
  if (spec.key_group_stride == 0) return std::max(1, vectors / spec.group);
  return std::max(W, vectors / spec.group / W * W);
}

/// Per-thread scratch of attend_block, kept across blocks to spare allocations. A block's query
/// vectors are its lanes: lane g * R + r is head g of row r when the group shares a key; when
/// each head reads its own slice, head g's rows start at lane g * round_up(R, W).
struct BlockScratch {
  ScratchFloats qt;              // [key_dim][lanes]: pre-scaled queries, transposed
  ScratchFloats first, end;      // [lanes]: the key range of each lane's row ([0, 0): a padding lane)
  ScratchFloats st;              // [kTile][lanes]: scores, then weights
  ScratchFloats acc;             // [lanes][value_dim]
  ScratchFloats max, sum, factor;  // [lanes]: the online-softmax state, and a tile's rescale
  ScratchFloats tile_max;        // [lanes]: a tile's largest score, from score_block
  ScratchFloats tile_sum;        // [lanes]: a fused tile's sum of weights, from score_block
  ScratchFloats keys, values;    // int8 caches: the tile's rows decoded (int8_tile.hpp)
};

/// Attends the query rows of `rows` (jobs of one sequence, any key ranges, at most block_rows)
/// for the `group` query heads of cache head `head`, and writes their normalised outputs.
template <class Arch, class KeyMaskT = PrefixMask, class Store>
void attend_block(const Store& store, const AttendSpec& spec, int head, std::span<const QueryJob> rows, BlockScratch& s) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  const int G = spec.group, dk = spec.key_dim, dv = spec.value_dim;
  const int R = int(rows.size()), seq = rows[0].seq;
  const int variants = spec.key_group_stride ? G : 1;  // distinct key slices per row (SlimK: one per head)
  const int per_variant = variants == 1 ? R * G : R;   // lanes each key slice is scored for
  const int span = (per_variant + W - 1) / W * W;
  const int lanes = variants * span;
  const auto lane = [&](int g, int r) { return variants == 1 ? g * R + r : g * span + r; };

  // The block's query rows are rows of the caller's matrix, and the transpose below reads each
  // a few floats at a time between scattered stores, so few of their misses overlapped (the
  // transpose took half of this function's time, 1500 tokens, 6 heads, full mask): every line
  // is asked for first. Likewise the output rows, at the end.
  for (const QueryJob& job : rows) ask_bytes(job.query + std::ptrdiff_t(head * G) * dk, G * dk * std::ptrdiff_t(sizeof(float)));
  s.qt.assign(std::size_t(dk) * lanes, 0.0f);
  s.first.assign(std::size_t(lanes), 0.0f);
  s.end.assign(std::size_t(lanes), 0.0f);
  // Tokens some row sees, [begin, end), and tokens every row sees, [all_first, all_end).
  int begin = std::numeric_limits<int>::max(), end = 0, all_first = 0, all_end = std::numeric_limits<int>::max();
  for (int r = 0; r < R; ++r) {
    const QueryJob& job = rows[std::size_t(r)];
    const KeyRange keys = KeyMaskT::range(job);
    if (keys.size() > 0) {
      begin = std::min(begin, keys.first);
      end = std::max(end, keys.end);
    }
    all_first = std::max(all_first, keys.first);
    all_end = std::min(all_end, keys.end);
    for (int g = 0; g < G; ++g) {
      const int i = lane(g, r);
      const float* q = job.query + std::ptrdiff_t(head * G + g) * dk;
      for (int d = 0; d < dk; ++d) s.qt[std::size_t(d) * lanes + i] = q[d] * spec.scale;  // fold the scale into q once
      s.first[std::size_t(i)] = float(keys.first);
      s.end[std::size_t(i)] = float(keys.end);
    }
  }
  s.st.resize(std::size_t(kTile) * lanes);
  s.acc.assign(std::size_t(lanes) * dv, 0.0f);
  s.max.assign(std::size_t(lanes), kNegativeInfinity<float>);
  s.sum.assign(std::size_t(lanes), 0.0f);
  s.factor.resize(std::size_t(lanes));
  s.tile_max.resize(std::size_t(lanes));
  s.tile_sum.resize(std::size_t(lanes));
  bool maxima_finite = false;  // every lane's running max finite: a whole tile may then be fused

  const B minus_inf(kNegativeInfinity<float>), largest(kLargestFinite<float>), zero(0.0f), one(1.0f);
  for (int t = begin; t < end;) {
    const auto stored_keys = store.run(spec.key_tensor, seq, t, head);
    const auto stored_values = store.run(spec.value_tensor, seq, t, head);
    const int n = std::min({kTile, end - t, stored_keys.count, stored_values.count});
    const auto keys = tile_rows<Arch>(stored_keys, n, spec.key_scales, s.keys);
    const auto values =
        spec.value_tensor == spec.key_tensor ? keys : tile_rows<Arch>(stored_values, n, spec.value_scales, s.values);
    // Whether the mask drops a token of this tile inside a row's range (asked per row and token).
    bool dropped = false;
    if constexpr (KeyMaskT::drops_keys)
      for (int r = 0; r < R && !dropped; ++r)
        for (int j = 0; j < n && !dropped; ++j) dropped = !KeyMaskT::keeps(rows[std::size_t(r)], t + j);
    // A tile every row sees whole (and no token dropped): score_block also takes each lane's max,
    // so that the softmax reads the scores once, not twice.
    const bool whole = t >= all_first && t + n <= all_end && !dropped;
    const auto score = [&](float* lane_max, const float* shift, float* lane_sum) {
      for (int v = 0; v < variants; ++v)
        score_block<Arch>(keys.data + spec.key_offset + v * spec.key_group_stride, keys.stride, n, dk, s.qt.data(), lanes,
                          v * span, span, s.st.data(), lanes, lane_max, shift, lane_sum);
    };
    // Fused: once every lane has a finite running max, a whole tile's weights are taken in
    // score_block against that max, before the tile's own max is known (stale: a score may
    // exceed it, so a weight may exceed 1; the softmax below rescales a lane whose max rose by
    // more than kRescaleAbove). If a score rose by kFusedLimit or more (a weight could have
    // overflowed, or a score is +inf), the tile is scored again the unfused way.
    // (Scored again, the tile raises tile_max to the maxima it already holds.)
    if (whole) std::fill(s.tile_max.begin(), s.tile_max.end(), kNegativeInfinity<float>);
    bool fused = whole && maxima_finite;
    if (fused) {
      std::fill(s.tile_sum.begin(), s.tile_sum.end(), 0.0f);
      score(s.tile_max.data(), s.max.data(), s.tile_sum.data());
      for (int c = 0; c < lanes && fused; c += W)
        fused = !xsimd::any(B::load_unaligned(s.tile_max.data() + c) >= B::load_unaligned(s.max.data() + c) + B(kFusedLimit));
    }
    if (!fused) score(whole ? s.tile_max.data() : nullptr, nullptr, nullptr);

    // Tokens the mask drops inside the rows' ranges score -inf.
    if (dropped)
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < n; ++j)
          if (!KeyMaskT::keeps(rows[std::size_t(r)], t + j))
            for (int g = 0; g < G; ++g) s.st[std::size_t(j) * lanes + lane(g, r)] = kNegativeInfinity<float>;
    // One online-softmax step for W lanes at a time. Scores of tokens outside a lane's range
    // become -inf, +inf becomes the largest float (bounded_score); a NaN stays and shows.
    const bool masked = !whole;
    auto all_finite_maxima = xsimd::batch_bool<float, Arch>(true);
    for (int c = 0; c < lanes; c += W) {
      const B old = B::load_unaligned(s.max.data() + c);
      B now = old, factor = one, tile_sum = zero;  // the lanes' new max, their rescale, the tile's sum of weights
      if (fused) {  // weights and their sum were taken against the running max, old
        const B block_max = B::load_unaligned(s.tile_max.data() + c);
        tile_sum = B::load_unaligned(s.tile_sum.data() + c);
        const auto rise = block_max > old + B(kRescaleAbove);
        if (xsimd::any(rise)) {  // shift those lanes to their new max, as the unfused step would have
          now = xsimd::select(rise, block_max, old);
          factor = xsimd::select(rise, softmax_exp<Arch>(old - now), one);
          const B tiny(std::numeric_limits<float>::min());
          for (int j = 0; j < n; ++j) {  // (a product below the smallest normal float is 0: no denormal weight)
            float* p = s.st.data() + std::ptrdiff_t(j) * lanes + c;
            const B w = B::load_unaligned(p) * factor;
            xsimd::select(w < tiny, zero, w).store_unaligned(p);
          }
          tile_sum *= factor;
        }
      } else {
        B block_max = minus_inf;  // (a NaN score may or may not pass: it shows in the sum below)
        if (masked) {
          const B first = B::load_unaligned(s.first.data() + c), last = B::load_unaligned(s.end.data() + c);
          for (int j = 0; j < n; ++j) {
            float* p = s.st.data() + std::ptrdiff_t(j) * lanes + c;
            const B token(float(t + j));
            const B x = xsimd::select(last <= token || first > token, minus_inf, B::load_unaligned(p));
            x.store_unaligned(p);
            block_max = xsimd::max(block_max, x);
          }
        } else {
          block_max = B::load_unaligned(s.tile_max.data() + c);
        }
        block_max = xsimd::select(block_max > largest, largest, block_max);
        now = xsimd::select(xsimd::isnan(old), old, xsimd::max(old, block_max));
        const auto empty = now == minus_inf;  // every score so far -inf: weights 0, no exp(-inf - -inf)
        factor = xsimd::select(empty, one, softmax_exp<Arch>(old - now));
        // An empty lane's scores are all -inf: shifted by 0 instead of -inf, each weighs exp(-inf) = 0.
        const B shift = xsimd::select(empty, zero, now);
        for (int j = 0; j < n; ++j) {
          float* p = s.st.data() + std::ptrdiff_t(j) * lanes + c;
          const B x = B::load_unaligned(p);
          const B w = softmax_exp<Arch>(xsimd::select(x > largest, largest, x) - shift);
          w.store_unaligned(p);
          tile_sum += w;
        }
      }
      // A weight is NaN exactly when its score is (or the shift is): the shift is never -inf,
      // and +inf was bounded. A lane whose tile sum is NaN saw a NaN score, so its maximum
      // becomes NaN, which every later tile's rescale factor carries, and its output is NaN:
      // the NaN weight has also gone into its sum and, times the values, its accumulator.
      now = xsimd::select(xsimd::isnan(tile_sum), tile_sum, now);
      all_finite_maxima = all_finite_maxima && now > minus_inf;
      now.store_unaligned(s.max.data() + c);
      xsimd::fma(B::load_unaligned(s.sum.data() + c), factor, tile_sum).store_unaligned(s.sum.data() + c);
      factor.store_unaligned(s.factor.data() + c);
    }
    maxima_finite = xsimd::all(all_finite_maxima);
    for (int i = 0; i < lanes; ++i)
      if (s.factor[std::size_t(i)] != 1.0f) scale<Arch>(s.factor[std::size_t(i)], s.acc.data() + std::ptrdiff_t(i) * dv, dv);

    // Weights times values. A row's unseen tokens have weight 0, which adds nothing as long as
    // their values are finite (0 * inf is NaN): where the tile holds a value that is not, each
    // row takes only the tokens it sees.
    const auto* value_rows = values.data + spec.value_offset;
    if (!masked || all_finite<Arch>(value_rows, values.stride, n, dv)) {
      accumulate_weights<Arch>(s.st.data(), WeightIndex<true>{lanes}, lanes, TileRows{value_rows, values.stride}, n, s.acc.data(), dv);
    } else {
      for (int r = 0; r < R; ++r) {
        const QueryJob& job = rows[std::size_t(r)];
        const KeyRange seen = KeyMaskT::range(job);
        const auto sees = [&](int j) {
          return t + j >= seen.first && t + j < seen.end && (!KeyMaskT::drops_keys || KeyMaskT::keeps(job, t + j));
        };
        for (int g = 0; g < G; ++g)
          accumulate_seen<Arch>(s.st.data() + lane(g, r), WeightIndex<true>{lanes}, TileRows{value_rows, values.stride}, n,
                                s.acc.data() + std::ptrdiff_t(lane(g, r)) * dv, dv, sees);
      }
    }
    // A lane that has seen nothing keeps a zero accumulator (its weights were 0, but a value
    // could be inf), as decode does.
    for (int i = 0; i < lanes; ++i)
      if (s.max[std::size_t(i)] == kNegativeInfinity<float>) std::fill_n(s.acc.data() + std::ptrdiff_t(i) * dv, dv, 0.0f);
    t += n;
  }

  for (const QueryJob& job : rows) ask_bytes</*Write=*/1>(job.out + std::ptrdiff_t(head * G) * dv, G * dv * std::ptrdiff_t(sizeof(float)));
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) {
      const int i = lane(g, r);
      const float sum = s.sum[std::size_t(i)];
      const float inv = sum > 0 ? 1.0f / sum : 0.0f;
      const float* acc = s.acc.data() + std::ptrdiff_t(i) * dv;
      float* out = rows[std::size_t(r)].out + std::ptrdiff_t(head * G + g) * dv;
      for (int c = 0; c < dv; ++c) out[c] = acc[c] * inv;
    }
}

}  // namespace polyattn::exec::cpu
