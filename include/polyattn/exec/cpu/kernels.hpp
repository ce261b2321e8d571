// The CPU decode kernel for one (query row, cache head, token chunk) of the attend primitive:
// tiles of up to kTile rows, each scored and accumulated for the whole group of query heads
// at once (decode_tile.hpp), with one online-softmax step per head per tile. A cache row is
// read from memory once per group, whatever the group size.
// The architecture is a template parameter (xsimd's default for the including translation
// unit's flags, until run-time dispatch instantiates one per ISA).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "polyattn/cache/layout_traits.hpp"
#include "polyattn/core/attend.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cpu/decode_tile.hpp"

namespace polyattn::exec::cpu {

/// y[i] *= alpha
template <class Arch>
void scale(float alpha, float* y, int n) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  int i = 0;
  const B a(alpha);
  for (; i + W <= n; i += W) (a * B::load_unaligned(y + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] *= alpha;
}

/// Bounds s[0 .. n) in place (bounded_score, core/online_softmax.hpp: +inf becomes the largest
/// float; NaN, bad input that must show, and -inf pass) and returns the largest, n >= 1. s is
/// readable up to round_up(n, W): the padding lanes are set to -inf, which the exp below turns
/// into 0.
template <class Arch>
float bound_and_max(float* s, int n) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  const int padded = (n + W - 1) / W * W;
  std::fill(s + n, s + padded, kNegativeInfinity<float>);
  const B largest(kLargestFinite<float>);
  B m(kNegativeInfinity<float>);
  for (int i = 0; i < padded; i += W) {
    const B x = B::load_unaligned(s + i);
    const B bounded = xsimd::select(x > largest, largest, x);
    bounded.store_unaligned(s + i);
    m = xsimd::max(m, bounded);
  }
  alignas(64) float lanes[W];
  m.store_aligned(lanes);
  return *std::max_element(lanes, lanes + W);
}

/// s[j] = exp(s[j] - m) over round_up(n, W) lanes; returns the sum. m is finite.
template <class Arch>
float exp_shifted_sum(float* s, int n, float m) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  const B shift(m);
  B total(0.0f);
  for (int i = 0; i < n; i += W) {
    const B e = xsimd::exp(B::load_unaligned(s + i) - shift);
    e.store_unaligned(s + i);
    total += e;
  }
  return xsimd::hadd(total);
}

/// Scratch of one chunk: per query head of the group, a softmax state and a value_dim accumulator.
struct ChunkResult {
  SoftmaxState<float>* states;  // [group]
  float* acc;                   // [group][value_dim]
};

/// Attends the `group` (pre-scaled) queries `q` [group][key_dim] of cache head `head` over tokens
/// [begin, end) of `seq`, writing unnormalised partial results into `result`.
/// `scores` is scratch of kTile * group floats.
/// Score semantics: a tile whose scores are all -inf for a head adds nothing to it (no
/// exp(-inf - -inf)); a head that never sees a finite score keeps sum 0 (its output is 0).
template <class Arch, class Store>
void attend_chunk(const Store& store, const AttendSpec& spec, int seq, int head, int begin, int end, const float* q,
                  ChunkResult result, float* scores) {
  const int G = spec.group, dv = spec.value_dim;
  for (int g = 0; g < G; ++g) {
    result.states[g] = SoftmaxState<float>{};
    std::fill_n(result.acc + std::ptrdiff_t(g) * dv, dv, 0.0f);
  }
  // The part of a key row a tile reads: the group's key span, and the values when they live there.
  const bool separate_values = spec.value_tensor != spec.key_tensor;
  const int key_span = spec.key_group_stride ? (G - 1) * spec.key_group_stride + spec.key_dim : spec.key_dim;
  const int read_begin = separate_values ? spec.key_offset : std::min(spec.key_offset, spec.value_offset);
  const int read_end = separate_values ? spec.key_offset + key_span : std::max(spec.key_offset + key_span, spec.value_offset + dv);
  int t = begin;
  while (t < end) {
    const auto keys = store.run(spec.key_tensor, seq, t, head);
    const auto values = store.run(spec.value_tensor, seq, t, head);
    const int n = std::min({end - t, keys.count, values.count, kTile});
    KeyTile tile{keys.data + spec.key_offset, keys.stride, std::ptrdiff_t(spec.key_group_stride), spec.key_dim, n};
    tile.next_count = std::min({n, keys.count - n, end - t - n});
    if (tile.next_count > 0) {  // (a pointer past the run is never formed)
      tile.next = reinterpret_cast<const char*>(keys.data + std::ptrdiff_t(n) * keys.stride + read_begin);
      tile.next_bytes = (read_end - read_begin) * int(sizeof(*keys.data));
    }
    score_tile<Arch>(q, G, tile, scores);
    for (int g = 0; g < G; ++g) {
      float* s = scores + g * kTile;
      const float factor = result.states[g].raise_max(bound_and_max<Arch>(s, n));
      if (result.states[g].empty()) continue;  // every score so far -inf: this tile adds nothing to head g
      if (factor != 1.0f) scale<Arch>(factor, result.acc + std::ptrdiff_t(g) * dv, dv);
      result.states[g].sum += exp_shifted_sum<Arch>(s, n, result.states[g].max);
    }
    accumulate_tile<Arch>(scores, G, values.data + spec.value_offset, values.stride, n, result.acc, dv);
    // A head that has seen nothing keeps a zero accumulator: its -inf scores were not turned into
    // weights, so what accumulate_tile added for it is discarded here.
    for (int g = 0; g < G; ++g)
      if (result.states[g].empty()) std::fill_n(result.acc + std::ptrdiff_t(g) * dv, dv, 0.0f);
    t += n;
  }
}

}  // namespace polyattn::exec::cpu
