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
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/online_softmax.hpp"
#include "polyattn/exec/cpu/decode_tile.hpp"
#include "polyattn/exec/cpu/int8_tile.hpp"
#include "polyattn/exec/cpu/scratch_floats.hpp"
#include "polyattn/exec/cpu/softmax_exp.hpp"

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
    const B e = softmax_exp<Arch>(B::load_unaligned(s + i) - shift);
    e.store_unaligned(s + i);
    total += e;
  }
  return xsimd::hadd(total);
}

/// Whether all n x dim elements of the rows are finite.
template <class Arch, class T>
bool all_finite(const T* rows, std::ptrdiff_t stride, int n, int dim) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  B zero(0.0f), z(0.0f);  // x * 0 is 0 for finite x, NaN for inf and NaN
  float tail = 0.0f;
  for (int j = 0; j < n; ++j) {
    const T* row = rows + std::ptrdiff_t(j) * stride;
    int c = 0;
    for (; c + W <= dim; c += W) z += load_floats<Arch>(row + c) * zero;
    for (; c < dim; ++c) tail += decode_element(row[c]) * 0.0f;
  }
  return xsimd::all(z == zero) && tail == 0.0f;
}

/// acc[0 .. dim) += sum of w(0, j) row_j over the tokens j < n that seen(j) keeps, a run of
/// consecutive kept tokens at a time: a token a row does not see has weight 0, but its value need
/// not be finite (0 * inf is NaN), so it is not read at all. One query vector (weights at w).
template <class Arch, class T, bool ByToken, class Seen>
void accumulate_seen(const float* w, WeightIndex<ByToken> at, TileRows<T> rows, int n, float* acc, int dim, Seen&& seen) {
  for (int a = 0; a < n;) {
    if (!seen(a)) {
      ++a;
      continue;
    }
    int b = a + 1;
    while (b < n && seen(b)) ++b;
    accumulate_weights<Arch>(w + at(0, a), at, 1, rows.from(a), b - a, acc, dim);
    a = b;
  }
}

/// Whether a token's heads follow one another in the store (Nhd); false for a view that does not say.
template <class Store>
constexpr bool heads_adjacent() {
  if constexpr (requires { Store::heads_adjacent; })
    return Store::heads_adjacent;
  else
    return false;
}

/// Whether a page of the store holds every head's rows of its tokens (Paged<P>); false for a
/// view that does not say.
template <class Store>
constexpr bool heads_paged() {
  if constexpr (requires { Store::heads_paged; })
    return Store::heads_paged;
  else
    return false;
}

/// Rows [offset, offset + count) of a decode tile that lie in one run of the store.
struct TileRun {
  int offset = 0, count = 0;
};

/// Scratch of one chunk: per cache head and query head of its group, a softmax state and a
/// value_dim accumulator.
struct ChunkResult {
  SoftmaxState<float>* states;  // [heads][group]
  float* acc;                   // [heads][group][value_dim]
};

/// The floats of attend_chunk's `scores` scratch for `heads` cache heads of `group` query heads:
/// each head's scores of a tile, and a slab for one pass (the page order of Paged<P>).
constexpr std::size_t chunk_score_floats(int heads, int group) { return std::size_t(heads + 1) * std::size_t(group) * kTile; }

/// Attends the `group` (pre-scaled) queries of each cache head h in [first_head, first_head +
/// heads), q[h - first_head][group][key_dim], over tokens [begin, end) of job.seq (part of the
/// job's key range; a key mask that drops keys is asked for each of them), writing
/// unnormalised partial results into `result`. `scores` is scratch of chunk_score_floats(heads,
/// group) floats.
/// The heads are taken tile by tile, all of them before the next tile: when a token's heads are
/// adjacent (Nhd) the tile's rows are then read from memory once, front to back, for all heads,
/// instead of one strided pass per head.
/// Score semantics: a tile whose scores are all -inf for a head adds nothing to it (no
/// exp(-inf - -inf)); a head that never sees a finite score keeps sum 0 (its output is 0).
/// An int8 cache's codes are read as they are (load_floats), and the scales applied per row and
/// segment: to each score after the dot product, and to the weights of the value product
/// (accumulate_int8_tile); a tile that holds a non-finite scale and tokens the mask drops is
/// decoded to floats first (int8_tile.hpp), so that a dropped token's NaN is never multiplied in.
template <class Arch, class KeyMaskT = PrefixMask, class Store>
void attend_chunk(const Store& store, const AttendSpec& spec, const QueryJob& job, int first_head, int heads, int begin, int end,
                  const float* q, ChunkResult result, float* scores) {
  using T = std::remove_cvref_t<decltype(*store.row(0, 0, 0, 0))>;
  using Base = default_kernels_t<Arch>;  // every pass but the scores: a policy's are avx512bw's
  constexpr bool int8 = is_scaled_int8<T>;
  const int G = spec.group, dv = spec.value_dim, seq = job.seq;
  std::fill_n(result.states, std::ptrdiff_t(heads) * G, SoftmaxState<float>{});
  std::fill_n(result.acc, std::ptrdiff_t(heads) * G * dv, 0.0f);
  // The part of a key row a tile reads: the group's key span, and the values when they live there.
  const bool separate_values = spec.value_tensor != spec.key_tensor;
  const int key_span = spec.key_group_stride ? (G - 1) * spec.key_group_stride + spec.key_dim : spec.key_dim;
  const int read_begin = separate_values ? spec.key_offset : std::min(spec.key_offset, spec.value_offset);
  // (an int8 row's scales follow its codes: the whole stored row)
  const int read_end = is_scaled_int8<T>   ? spec.key_scales.stored_elements()
                       : separate_values ? spec.key_offset + key_span
                                         : std::max(spec.key_offset + key_span, spec.value_offset + dv);
  // With adjacent heads, the next tile is asked for from the first head's row to the last's.
  int ask_end = read_end;
  if constexpr (heads_adjacent<Store>()) ask_end += (heads - 1) * store.tensors()[std::size_t(spec.key_tensor)].dim;
  // Separate value rows are asked for with the keys, for every group: perf put half of MQA's
  // value pass and most of MHA f16's on the first loads of each value row, which the hardware
  // prefetchers did not cover. Asked in bursts, MHA and GQA<2> f32 rows ran 1.01-1.1x slower and
  // were left out; asked a line at a time (NextTile), MHA f32 took 0.96 and GQA<2> f32 0.97-0.98
  // of the time (Intel Xeon, Hnd, L 65536, batch 16, medians of 9 calls alternated in one process,
  // the same outputs). The part of a value row read: its values (an int8 row: codes and scales,
  // the whole stored row). With no asks at all for float rows of groups of 1-2 heads whose next
  // tile continues the run, MHA f32 took 0.89-0.90 of the time on an AMD EPYC Zen 4 but 1.18 on a
  // Zen 3 (GQA<2> f32 0.88-0.95 and 1.09), and with the key rows' asks alone 1.11-1.24 on the Zen
  // 3 (bench/ab, L 65536, batch 16; the decode log, 2026-12-04 and 2026-12-06): kept on every CPU.
  // Adjacent heads (Nhd) with value rows of their own (MHA, GQA): every head's part of the next
  // tile's key and value rows, paced over all heads' passes (NextTile). Measured (AMD EPYC Zen 4,
  // L 65536, batch 16, three alternated rounds, best of 5) against asking the key rows whole in
  // the first head's score pass: MHA f32 1.43-1.60x, f16 1.74-1.86x and GQA<2> f32 1.57-1.67x
  // faster, about Hnd's speed. int8 rows too (accumulate_int8_tile ticks the asks): MHA 1.2x and
  // GQA<2> 1.19x faster in median (Intel Xeon, L 65536, batch 16, 25 calls each alternated in one
  // process), the same outputs.
  bool pace_heads = false;
  int value_heads_span = 0;  // from the first head's part of a value row to the last head's
  if constexpr (heads_adjacent<Store>()) {
    pace_heads = separate_values && heads > 1;
    value_heads_span = (heads - 1) * store.tensors()[std::size_t(spec.value_tensor)].dim;
  }
  const int value_begin = int8 ? 0 : spec.value_offset;
  const int value_end = int8 ? spec.value_scales.stored_elements() : spec.value_offset + dv;
  // Vector loads of a row in both passes: the paced asks' clock (NextTile::pace).
  const int loads_per_row = score_loads_per_row<Base, T>(G, spec.key_dim, spec.key_group_stride == 0) + value_loads_per_row<Base>(G, dv);
  // A tile's rows from token `from`: one run of the store, or several (the pages of Paged<P>,
  // kTileRuns at most), kTile rows at most. `ends_run`: the tile takes its last run to the end,
  // so the next tile starts a run of its own.
  struct Tile {
    TileRun runs[kTileRuns];
    int run_count = 0, n = 0;
    bool ends_run = false;
  };
  const auto tile_from = [&](int from) {
    Tile tile;
    while (tile.run_count < kTileRuns && from + tile.n < end) {
      const int count = std::min({end - from - tile.n, store.run(spec.key_tensor, seq, from + tile.n, first_head).count,
                                  store.run(spec.value_tensor, seq, from + tile.n, first_head).count});
      const int take = std::min(count, kTile - tile.n);
      if (take == 0) break;
      tile.runs[tile.run_count++] = {tile.n, take};
      tile.n += take;
      tile.ends_run = take == count;
    }
    return tile;
  };
  // The steps of a tile that both orders of passes take (below).
  // Head h's online-softmax step over the `count` scores s[g * kTile + j] of the tile from token
  // `first`: the tokens the mask drops get -inf first. Returns whether it dropped any.
  const auto softmax_step = [&](int h, float* s, int first, int count) -> bool {
    SoftmaxState<float>* states = result.states + std::ptrdiff_t(h) * G;
    float* acc = result.acc + std::ptrdiff_t(h) * G * dv;
    bool dropped = false;
    if constexpr (KeyMaskT::drops_keys) {
      for (int j = 0; j < count; ++j)
        if (!KeyMaskT::keeps(job, first + j)) {
          dropped = true;
          for (int g = 0; g < G; ++g) s[g * kTile + j] = kNegativeInfinity<float>;
        }
    }
    for (int g = 0; g < G; ++g) {
      const float factor = states[g].raise_max(bound_and_max<Base>(s + g * kTile, count));
      if (states[g].empty()) continue;  // every score so far -inf: this tile adds nothing to head g
      if (factor != 1.0f) scale<Base>(factor, acc + std::ptrdiff_t(g) * dv, dv);
      states[g].sum += exp_shifted_sum<Base>(s + g * kTile, count, states[g].max);
    }
    return dropped;
  };
  // Whether `count` value rows of a run (their values, or an int8 row's scales) are finite.
  const auto values_finite = [&](CacheRun<T> values, int count) -> bool {
    if constexpr (int8)
      return scales_finite(values.data, values.stride, count, spec.value_scales);
    else
      return all_finite<Base>(values.data + spec.value_offset, values.stride, count, dv);
  };
  // Only the tokens the mask keeps, of one run of values (`count` rows from token `first`, weights
  // w[g * kTile + j]), into head h: where a dropped token's value (or int8 scale) is not finite,
  // its weight 0 would still add NaN (0 * inf).
  const auto accumulate_kept = [&](int h, const float* w, CacheRun<T> values, int first, int count) {
    thread_local ScratchFloats decoded;  // int8: the run decoded to floats (int8_tile.hpp)
    const auto rows = tile_rows<Base>(values, count, spec.value_scales, decoded);
    float* acc = result.acc + std::ptrdiff_t(h) * G * dv;
    for (int g = 0; g < G; ++g)
      accumulate_seen<Base>(w + g * kTile, WeightIndex<false>{}, TileRows{rows.data + spec.value_offset, rows.stride}, count,
                            acc + std::ptrdiff_t(g) * dv, dv, [&](int j) { return KeyMaskT::keeps(job, first + j); });
  };
  // A head that has seen nothing keeps a zero accumulator: its -inf scores were not turned into
  // weights, so what the value pass added for it is discarded.
  const auto clear_unseen = [&](int h) {
    for (int g = 0; g < G; ++g)
      if (result.states[std::ptrdiff_t(h) * G + g].empty()) std::fill_n(result.acc + (std::ptrdiff_t(h) * G + g) * dv, dv, 0.0f);
  };
  Tile tile = tile_from(begin);
  // The next tile's asks (each_head: the present head's): one object for the chunk, cleared for
  // each tile. Paged<P>'s tiles gather pages, so its asks walk several runs (NextTile<kTileRuns>);
  // the contiguous layouts' asks keep one run's two spans.
  using Next = NextTile<heads_paged<Store>() ? kTileRuns : 1>;
  Next next;
  for (int t = begin; t < end;) {
    const TileRun* runs = tile.runs;
    const int run_count = tile.run_count, n = tile.n;
    const Tile next_tile = tile_from(t + n);  // (empty past the chunk's end)
    // The next tile's rows, run by run, the part of head first_head + h. Where they lie in new
    // runs (Paged<P>, whose pages hold a head's rows as one block), each head's block is at an
    // address the hardware prefetchers have not seen (they stop at 4 KiB boundaries), so each
    // head asks for its own part, keys and values, as it is scored (each_head); asked only for
    // the first head, the other heads' blocks came in on demand.
    const bool new_runs = run_count > 1 || tile.ends_run;
    const auto next_key_lines = [&](int i, int h) -> typename Next::Lines {  // run i of the next tile
      const auto keys = store.run(spec.key_tensor, seq, t + n + next_tile.runs[i].offset, first_head + h);
      return {reinterpret_cast<const char*>(keys.data + read_begin), keys.stride * std::ptrdiff_t(sizeof(T)),
              (ask_end - read_begin) * int(sizeof(T))};
    };
    const auto next_value_lines = [&](int i, int h) -> typename Next::Lines {  // the group's (MQA), every head's (Nhd), or this head's
      const auto values = store.run(spec.value_tensor, seq, t + n + next_tile.runs[i].offset, first_head + h);
      const int value_last = value_end + (pace_heads ? value_heads_span : 0);
      return {reinterpret_cast<const char*>(values.data + value_begin), values.stride * std::ptrdiff_t(sizeof(T)),
              (value_last - value_begin) * int(sizeof(T))};
    };
    const auto set_next_tile = [&](Next& asks, int h, bool values_too) {
      asks.clear();
      for (int i = 0; i < next_tile.run_count; ++i)
        asks.add(next_key_lines(i, h), values_too ? next_value_lines(i, h) : typename Next::Lines{}, next_tile.runs[i].count);
    };
    // The next tile's lines are asked for one at a time, every few vector loads of this tile's
    // passes (NextTile::pace), wherever its rows lie in one run of the store (Hnd; Nhd, all heads'
    // parts, over every head's passes; SlimK2, XCache and MQA on any layout; the pages of
    // Paged<P>, run after run), float, 16-bit and int8 alike. Where the next tile's rows lie in a
    // block of their own per head (Paged<P> with several heads to a task: heads_apart), each head
    // asks for its own part, keys and values, paced over its own passes (each_head). Against
    // asking a row whole as that row was scored:
    // MHA and GQA<2> on Paged<16> took 0.77-0.90 of the time (f32, half, bfloat16; int8 0.90-0.97)
    // at L 65536 with batch 1 and 16 and at L 4096 with batch 64, GQA<2> half on Paged<256>
    // 0.89-0.91, MHA f32 there 0.99-1.01, and in the L3 (L 1500, batch 16) 0.85-1.03 (AMD EPYC Zen
    // 5, 2 threads, medians of 7-41 calls alternated in one process, the same outputs). A single
    // head's next pages (MQA on Paged<P>) are paced too, now that a tile's pages are one pass and
    // one sequence of asks: against a row whole as each row was scored, MQA on Paged<16> took
    // 0.88-0.97 of the time in half, 0.96-0.99 in f32 and 0.97 in int8 at L 65536, batch 16, and
    // 0.85-0.95 at L 4096, batch 64; on Paged<64> 0.88-0.91; at batch 1 0.96-1.04 (AMD EPYC Zen 5,
    // medians of 11-61 alternated calls, the same outputs). Paced page by page, each page's passes
    // apart, MQA f32 on Paged<16> had taken 1.18x as long on the Intel Xeon. A page of Paged<P>
    // holds each head's rows as a block of its own, so a task's heads ask for their own parts of
    // the next tile even within a page (P > kTile): with head 0's asks only, MHA and GQA<2> on
    // Paged<256> took 1.06-1.28x as long (L 65536 batch 16, L 4096 batch 64).
    // Asked in bursts (a row whole as it was scored, or a few lines per step of work) the asks
    // held the core (NextTile). Asked a line at a time, against those bursts: XCache f32 took
    // 0.85-0.92 of the time (Hnd, Nhd, Paged<16>), f16 0.97, SlimK2 f32 0.92-0.93, f16 1.01, MQA
    // f32 0.97-1.00, f16 0.95, MHA f32 and 16-bit 0.92-0.95, GQA<2> 0.97-0.99; int8 rows, now paced
    // too, MHA 0.96, XCache 0.94, GQA<2> 0.99, MQA 1.03-1.05 and SlimK2 1.05-1.06 (Intel Xeon, L
    // 65536, batch 16, medians of 9-11 calls alternated in one process, the same outputs); at L 1500
    // (in the L3) 0.84-0.98 and at batch 1 0.85-1.02.
    const bool heads_apart = heads_paged<Store>() && heads > 1;
    // Several heads of a tile over several pages (float and 16-bit MHA and GQA on Paged<P>): the
    // passes go page by page, head after head, so that each page's head blocks are read in address
    // order: every head's scores, then every head's softmax step over the whole tile, then every
    // head's values. Each pass asks for its block of the next tile (the same page of the tile, the
    // same head), key lines in the score passes, value lines in the value passes. Head after head,
    // each head's blocks of the tile's 4 pages in turn, the reads jump 4 KiB and back through each
    // page (16 float rows of 64 a block, 6 heads): a synthetic read of MHA f32's rows in that order
    // (L 65536, batch 16, 2 threads) reached 35 GB/s at best, against 48 page by page, as much as
    // Hnd's order. In the kernel, against head after head (AMD EPYC Zen 5, Paged<16>, medians of
    // 11-41 calls alternated in one process, the same outputs; the Zen 5 section of the decode
    // log, bench/results/cpu_decode_variants/README.md): MHA f32 took 0.68-0.78 of the time,
    // GQA<2> f32 0.72-0.79, half and bfloat16 0.85-0.86 at L 65536, batch 16; f32 0.73-0.81 and
    // 16-bit 0.84-1.03 at batch 1 and at L 4096, batch 64; 0.81-0.96 in the L3 (L 1500, batch
    // 16). A tile per page (each page's passes apart) took 1.02-1.11x this order's time at L
    // 65536, batch 16 and 1.19-1.37x in the L3. int8 keeps the head-major passes: this order took
    // 1.16-1.20x their time at L 65536, batch 16 and in the L3 (and 1.11-1.16x for MHA and GQA<2>
    // int8 on an Intel Xeon at 2.0 GHz: bench/ab/ab_headers.sh,
    // bench/results/cpu_decode_variants/xeon105_2threads_2026-12-01_int8_page_order_ab.txt).
    if constexpr (!int8)
      if (heads_apart && run_count > 1 && separate_values) {
        const int score_loads = score_loads_per_row<Base, T>(G, spec.key_dim, spec.key_group_stride == 0);
        const int value_loads = value_loads_per_row<Base>(G, dv);
        // The asks of the pass over page i of head h: the next tile's page i (and, from the last
        // page, the next tile's pages past this tile's count), its keys or its values. The next
        // tile may have fewer pages, or none (the chunk's end): only its own are asked for.
        const auto ask_next = [&](int i, int h, bool values) {
          next.clear();
          const int last = i + 1 < run_count ? std::min(i + 1, next_tile.run_count) : next_tile.run_count;
          for (int r = i; r < last; ++r)
            next.add(values ? typename Next::Lines{} : next_key_lines(r, h), values ? next_value_lines(r, h) : typename Next::Lines{},
                     next_tile.runs[r].count);
          next.pace(values ? value_loads : score_loads);
          return next.count ? &next : nullptr;
        };
        // A pass writes whole SIMD blocks of scores, past its run's rows: it scores into the slab
        // after the heads' scores, and its rows' scores are copied into place.
        float* pass_scores = scores + std::ptrdiff_t(heads) * G * kTile;
        for (int i = 0; i < run_count; ++i)
          for (int h = 0; h < heads; ++h) {
            const CacheRun<T> keys = store.run(spec.key_tensor, seq, t + runs[i].offset, first_head + h);
            score_tile<Arch>(q + std::ptrdiff_t(h) * G * spec.key_dim, G,
                             KeyTile<T, Next>{TileRows<T>{keys.data + spec.key_offset, keys.stride}, std::ptrdiff_t(spec.key_group_stride),
                                              spec.key_dim, runs[i].count, ask_next(i, h, false)},
                             pass_scores);
            next.ask_rest();
            for (int g = 0; g < G; ++g)
              std::copy_n(pass_scores + g * kTile, runs[i].count, scores + (std::ptrdiff_t(h) * G + g) * kTile + runs[i].offset);
          }
        bool dropped = false;  // (the same tokens for every head)
        for (int h = 0; h < heads; ++h) dropped = softmax_step(h, scores + std::ptrdiff_t(h) * G * kTile, t, n);
        for (int i = 0; i < run_count; ++i)
          for (int h = 0; h < heads; ++h) {
            const CacheRun<T> values = store.run(spec.value_tensor, seq, t + runs[i].offset, first_head + h);
            const float* w = scores + std::ptrdiff_t(h) * G * kTile + runs[i].offset;
            Next* asks = ask_next(i, h, true);
            if (dropped && !values_finite(values, runs[i].count))
              accumulate_kept(h, w, values, t + runs[i].offset, runs[i].count);
            else
              accumulate_tile<Base>(w, G, TileRows<T>{values.data + spec.value_offset, values.stride}, runs[i].count,
                                    result.acc + std::ptrdiff_t(h) * G * dv, dv, asks);
            next.ask_rest();
          }
        for (int h = 0; h < heads; ++h) clear_unseen(h);
        t += n;
        tile = next_tile;
        continue;
      }
    const bool blocks_apart = (new_runs || heads_apart) && separate_values;  // a head's next rows: a block of its own
    const bool each_head = blocks_apart && heads > 1 && !pace_heads;
    if (!each_head) {  // (each_head: every head sets its own below)
      set_next_tile(next, 0, separate_values);
      next.pace(loads_per_row, pace_heads ? heads : 1);
    }
    const T* key_table[kTile];  // the rows of a tile over several runs (TileRows)
    const T* value_table[kTile];
    std::ptrdiff_t table_strides[kTileRuns][2];  // the tables' runs' strides, keys and values
    for (int h = 0; h < heads; ++h) {
      // The tile's rows of head h, run by run, and as its passes read them: strided in one run,
      // else through a table of rows, so that each pass takes all of the tile's pages at once
      // (before, each page of Paged<16> had passes of its own, which reload the group's queries
      // and accumulators: see the decode log's Zen 5 section for the A/B).
      CacheRun<T> keys[kTileRuns], values[kTileRuns];
      for (int i = 0; i < run_count; ++i) {
        keys[i] = store.run(spec.key_tensor, seq, t + runs[i].offset, first_head + h);
        values[i] = store.run(spec.value_tensor, seq, t + runs[i].offset, first_head + h);
      }
      // The tables are built for the tile's first head. Paged<P> puts head h's block of a page at
      // the same distance from head 0's in every page, so the other heads read the same tables at
      // their distance (TileRows::offset); a store that does not gets tables of its own per head.
      // (Built again for each head, MHA 16-bit on Paged<16> took 1.04x as long.)
      std::ptrdiff_t key_shift = 0, value_shift = 0;
      if (run_count > 1) {
        bool shared = h > 0;
        if (shared) {
          key_shift = keys[0].data - key_table[0];
          value_shift = values[0].data - value_table[0];
          for (int i = 0; shared && i < run_count; ++i)
            shared = keys[i].data - key_table[runs[i].offset] == key_shift && values[i].data - value_table[runs[i].offset] == value_shift &&
                     keys[i].stride == table_strides[i][0] && values[i].stride == table_strides[i][1];
        }
        if (!shared) {
          key_shift = value_shift = 0;
          for (int i = 0; i < run_count; ++i) {
            table_strides[i][0] = keys[i].stride;
            table_strides[i][1] = values[i].stride;
            for (int j = 0; j < runs[i].count; ++j) {
              key_table[runs[i].offset + j] = keys[i].data + std::ptrdiff_t(j) * keys[i].stride;
              value_table[runs[i].offset + j] = values[i].data + std::ptrdiff_t(j) * values[i].stride;
            }
          }
        }
      }
      const TileRows<T> key_rows =
          run_count > 1 ? TileRows<T>{nullptr, 0, key_table, key_shift} : TileRows<T>{keys[0].data, keys[0].stride};
      const TileRows<T> value_rows =
          run_count > 1 ? TileRows<T>{nullptr, 0, value_table, value_shift} : TileRows<T>{values[0].data, values[0].stride};
      float* acc = result.acc + std::ptrdiff_t(h) * G * dv;
      if (each_head) {
        set_next_tile(next, h, true);
        next.pace(loads_per_row);
      }
      Next* asks = next.count ? &next : nullptr;  // what the passes tick (nullptr: nothing)
      score_tile<Arch>(q + std::ptrdiff_t(h) * G * spec.key_dim, G,
                       KeyTile<T, Next>{key_rows.plus(spec.key_offset), std::ptrdiff_t(spec.key_group_stride), spec.key_dim, n, asks}, scores);
      if constexpr (int8)  // the dot products were with the codes: times the scale of the segment head g read
        scale_scores_by_segment<Base>(scores, G, key_rows, n, spec.key_scales, spec.key_offset, spec.key_group_stride);
      const bool dropped = softmax_step(h, scores, t, n);
      // A dropped token has weight 0, which adds nothing unless its value (or int8 scale) is not
      // finite (0 * inf is NaN): then each head takes only the tokens it sees.
      bool whole_tile = true;
      for (int i = 0; dropped && whole_tile && i < run_count; ++i) whole_tile = values_finite(values[i], runs[i].count);
      if (whole_tile) {
        if constexpr (int8) {
          thread_local ScratchFloats weights;
          weights.resize(std::size_t(G) * kTile);
          accumulate_int8_tile<Base>(scores, G, value_rows, n, spec.value_scales, weights.data(), acc, asks);
        } else {
          accumulate_tile<Base>(scores, G, value_rows.plus(spec.value_offset), n, acc, dv, asks);
        }
      } else {
        for (int i = 0; i < run_count; ++i) accumulate_kept(h, scores + runs[i].offset, values[i], t + runs[i].offset, runs[i].count);
      }
      clear_unseen(h);
      if (each_head) next.ask_rest();
    }
    next.ask_rest();
    t += n;
    tile = next_tile;
  }
}

}  // namespace polyattn::exec::cpu
