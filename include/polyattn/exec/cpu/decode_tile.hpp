// The two register-blocked halves of a decode tile: up to kTile consecutive cached rows of one
// cache head, read for all G query heads of its group at once.
//   score_tile:      scores[g][j] = q_g . key_j(g)        (G x n, no horizontal sum per token)
//   accumulate_tile: acc[g][:]   += sum_j p[g][j] value_j  (G x value_dim, accumulators in registers)
// Both are templates on the xsimd architecture and on the cache element type T (float, half,
// bfloat16: converted to fp32 right after the load, see load_floats.hpp; int8: the codes, their
// scales applied by the caller to the scores and, in accumulate_int8_tile, to the weights).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "polyattn/cache/cache_line.hpp"
#include "polyattn/core/row_scales.hpp"
#include "polyattn/exec/cpu/bf16_scores.hpp"
#include "polyattn/exec/cpu/int8_scores.hpp"
#include "polyattn/exec/cpu/load_floats.hpp"

namespace polyattn::exec::cpu {

/// Tokens per tile: one softmax rescale and one vectorised exp per head per tile. A multiple of
/// every SIMD width. Fewer rows for wide rows (so that a tile stays in L1 between its score and
/// value passes: 16 rows of XCache's 1536-byte row) ran 1.1-1.2x slower on SlimK2 and XCache.
inline constexpr int kTile = 64;

/// Most runs of the store a decode tile gathers (the pages of Paged<P>): one tile then takes up
/// to kTile rows of small pages, so that its fixed costs per head (the softmax step, the
/// accumulators' loads and stores) are shared by as many rows as Hnd's. With a tile per page,
/// Paged<16> took 1.5x (float) and 1.8x (int8) Hnd's time with the cache in L3 (MHA, Intel Xeon).
/// Float and 16-bit MHA and GQA on Paged<P> take such a tile's passes page by page, head after head,
/// so that a page's head blocks are read in address order (attend_chunk).
inline constexpr int kTileRuns = 8;

/// The rows of a tile as its passes read them: row j at first + j * stride (one run of the
/// store), or at table[j] (a tile that gathers several runs: the pages of Paged<P>, each page's
/// rows read in the same pass as the others'), then `offset` elements on (the part of the row read).
template <class T>
struct TileRows {
  const T* first = nullptr;
  std::ptrdiff_t stride = 0;
  const T* const* table = nullptr;  // nullptr: strided
  std::ptrdiff_t offset = 0;

  [[gnu::always_inline]] const T* operator[](int j) const {
    return (table ? table[j] : first + std::ptrdiff_t(j) * stride) + offset;
  }
  /// The same rows, `elements` further into each.
  TileRows plus(std::ptrdiff_t elements) const {
    TileRows rows = *this;
    rows.offset += elements;
    return rows;
  }
  /// Rows j, j + 1, ... as rows 0, 1, ...
  TileRows from(int j) const {
    TileRows rows = *this;
    if (table)
      rows.table += j;
    else
      rows.first += std::ptrdiff_t(j) * stride;
    return rows;
  }
};
template <class T>
TileRows(const T*, std::ptrdiff_t) -> TileRows<T>;  // clang before 17 deduces no aggregate's arguments

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
[[gnu::always_inline]] inline __m512 fold_pair(__m512 u, __m512 v) {
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
/// Always inlined: GCC 12 left it a call, and as no vector register survives a call, the score
/// passes stored and reloaded every query vector they hold in registers around it.
template <class Arch>
[[gnu::always_inline]] inline xsimd::batch<float, Arch> sum_each(const xsimd::batch<float, Arch>* rows) {
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
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, Arch> && B::size == 8) {
    // AVX2: two levels of hadd pair the rows' halves of each 128-bit lane, then the lanes are
    // added across: 6 hadds, 2 lane permutes and an add per 8 rows, against a horizontal sum and
    // a store per row. Lanes of u0: rows 0-3 over elements 0-3, then rows 0-3 over elements 4-7;
    // u1: rows 4-7.
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(rows[0], rows[1]), _mm256_hadd_ps(rows[2], rows[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(rows[4], rows[5]), _mm256_hadd_ps(rows[6], rows[7]));
    return B(_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  } else
#endif
  {
    alignas(64) float sums[B::size];
    for (std::size_t r = 0; r < B::size; ++r) sums[r] = xsimd::hadd(rows[r]);
    return B::load_aligned(sums);
  }
}

/// Asks for the cache lines of `bytes` bytes from p; Write and Locality as __builtin_prefetch
/// takes them (Locality 1: into L2, 3: into L1). Always inlined, as is every function below whose
/// only effect is to ask: GCC 12 took such a function, left out of line, for one without effects
/// and dropped the calls (int8 MQA's score pass asked for nothing and ran 1.3x as long).
template <int Write = 0, int Locality = 3>
[[gnu::always_inline]] inline void ask_bytes(const void* p, std::ptrdiff_t bytes) {
  const char* first = static_cast<const char*>(p);
  for (std::ptrdiff_t b = 0; b < bytes; b += 64) __builtin_prefetch(first + b, Write, Locality);
}

/// The next tile's rows, asked for while this tile is worked on, so that its reads overlap this
/// tile's arithmetic. Paced (pace()): the lines one at a time, one every `spacing` vector loads of
/// this tile's passes (tick_asks), the key rows' lines first, then the value rows', so that the
/// asks are spread evenly over both passes. Asked in bursts, they held the core: a row whole as it
/// was scored put the next tile's misses behind the score pass, and a few lines per step of work
/// (the pacing before this one) put 42% of XCache f32's score pass on the prefetch after each
/// burst (perf); a synthetic stream with XCache's work per byte read 36 GB/s with one ask every 2
/// loads against 27-30 with bursts of 2-8 (Intel Xeon, 2 threads; see attend_chunk for the
/// kernels' figures). (The score pass over one head's key ticks once per pair of rows, in
/// score_slices: up to 8 lines at once for float rows, with no loss beyond the noise measured
/// there.) Unpaced (rows that do not follow one another, such as one head's part of Nhd rows, or
/// pace(0)): row j of the score pass asks for the next tile's key row j whole
/// (score_step), and its value row j too. Lines go into L2 only (prefetcht2): a tile of XCache
/// rows is 96 KiB, more than L1, and prefetches into L1 ran 1.1-1.2x slower on SlimK2 and XCache.
template <int MaxRuns = 1>
struct NextTile {
  /// The lines of the next tile's rows of one kind in one run of the store: `bytes` bytes of
  /// each row, rows `stride` bytes apart from `first` (the first byte read).
  struct Lines {
    const char* first = nullptr;  // nullptr: none
    std::ptrdiff_t stride = 0;
    int bytes = 0;

    /// Asks for row j whole.
    [[gnu::always_inline]] void ask_row(int j) const {
      if (first) ask_bytes<0, 1>(first + j * stride, bytes);
    }
  };
  /// Rows [first, first + count) of the next tile, which lie in one run of the store.
  struct Run {
    Lines keys;    // the key rows (the part the tile reads)
    Lines values;  // value rows of their own (first nullptr: none; see attend_chunk for which groups)
    int first = 0, count = 0;
  };
  // What the passes read and write for every ask first.
  int count = 0;       // rows to ask for, over all runs (0: nothing)
  int spacing = 0;     // paced: vector loads per line asked; 0: row j whole as row j is scored
  int countdown = 0;   // paced: loads until the next ask
  int line_count = 0, asked = 0;
  // Paced: the next tile's lines as one sequence, every run's key lines, then every run's value
  // lines; span s holds lines [span_end[s - 1], span_end[s]), line k of it at span_base[s] + 64 k.
  // Addresses, not pointers: a base may lie before any object. One run (MaxRuns 1: Hnd, Nhd)
  // has two spans, and ask_one picks one without a branch; several (the pages of Paged<P>) are
  // walked span by span. (That walk, compiled for one run too, cost MHA f32 on Hnd 1.03-1.05x
  // the time with the cache in L3: AMD EPYC Zen 5, batch 16, L 1500.)
  int span = 0, span_limit = 0;  // the span of the next line to ask for, and its end
  std::uintptr_t span_base[2 * MaxRuns];
  int span_end[2 * MaxRuns];
  int run_count = 0;
  Run runs[MaxRuns];

  /// Forgets every run: nothing to ask for.
  void clear() { run_count = count = line_count = asked = spacing = 0; }
  /// Adds the next run's rows; past MaxRuns runs, the rest of the tile is not asked for.
  void add(const Lines& keys, const Lines& values, int rows) {
    if (run_count == MaxRuns) return;
    runs[run_count++] = {keys, values, count, rows};
    count += rows;
  }
  /// Paces the asks over a tile's work: `loads_per_row` vector loads of both passes per row of the
  /// tile (score_loads_per_row + value_loads_per_row), for each of `heads` heads whose passes
  /// tick it; 0: unpaced. Only where each run's rows of each kind follow one another (stride ==
  /// bytes: Hnd, Nhd with every head's part, a page's block), so that they are one span of lines.
  void pace(int loads_per_row, int heads = 1) {
    spacing = 0;
    asked = line_count = 0;
    int spans = 0;
    if (loads_per_row == 0 || count == 0) return;
    for (int r = 0; r < run_count; ++r)
      if (!follow(runs[r].keys) || !follow(runs[r].values)) return;
    const auto add_span = [&](int s, const Lines& l, int rows) {  // span s: the lines rows [0, rows) touch (none: empty)
      std::uintptr_t begin = 0, end = 0;
      if (l.first) {
        begin = reinterpret_cast<std::uintptr_t>(l.first) / 64 * 64;
        end = (reinterpret_cast<std::uintptr_t>(l.first) + std::uintptr_t(rows) * std::uintptr_t(l.bytes) + 63) / 64 * 64;
      }
      span_base[s] = begin - std::uintptr_t(line_count) * 64;
      line_count += int((end - begin) / 64);
      span_end[s] = line_count;
    };
    for (int r = 0; r < run_count; ++r) add_span(spans++, runs[r].keys, runs[r].count);
    for (int r = 0; r < run_count; ++r) add_span(spans++, runs[r].values, runs[r].count);
    span = 0;
    span_limit = span_end[0];
    spacing = std::max(1, heads * count * loads_per_row / std::max(1, line_count));
    countdown = spacing;
  }
  /// Row j of this tile is being scored (unpaced only): the next tile's row j, keys and values.
  [[gnu::always_inline]] void score_step(int j) const {
    if (spacing > 0 || j >= count) return;
    int r = 0;
    if constexpr (MaxRuns > 1)
      while (j >= runs[r].first + runs[r].count) ++r;
    runs[r].keys.ask_row(j - runs[r].first);
    runs[r].values.ask_row(j - runs[r].first);
  }
  /// Whether the value pass asks for part of the next tile.
  bool paced() const { return spacing > 0; }
  /// The address of line k < line_count of the paced sequence.
  std::uintptr_t line(int k) const {
    int s = 0;
    while (k >= span_end[s]) ++s;
    return span_base[s] + std::uintptr_t(k) * 64;
  }
  /// Asks for the next line (paced).
  [[gnu::always_inline]] void ask_one() {
    if (asked >= line_count) return;
    std::uintptr_t base;
    if constexpr (MaxRuns == 1) {
      base = asked < span_limit ? span_base[0] : span_base[1];
    } else {
      while (asked >= span_limit) span_limit = span_end[++span];  // (an empty span is passed)
      base = span_base[span];
    }
    __builtin_prefetch(reinterpret_cast<const void*>(base + std::uintptr_t(asked) * 64), 0, 1);
    ++asked;
  }
  /// Every paced line not asked for yet.
  [[gnu::always_inline]] void ask_rest() {
    while (asked < line_count) ask_one();
  }

 private:
  static bool follow(const Lines& l) { return !l.first || l.stride == l.bytes; }
};

/// Unrolls the loop that follows (a compile-time count of a few vectors) whole. The loops that tick
/// the asks (tick_asks) need it: with a walk over spans in ask_one (several runs to a tile), GCC 12
/// left score_rows' and score_slices' loops over a row's key vectors rolled and held the keys in
/// memory: XCache half on Hnd took 1.4x as long, MQA half 1.3x.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define POLYATTN_UNROLL _Pragma("GCC unroll 16")
#else
#define POLYATTN_UNROLL
#endif

/// A NextTile's paced asks as a pass's loop holds them: `left`, the loads until the next ask, in
/// a register (asks_left), ticked by the vector loads of the tile's rows (tick_asks), written back
/// when the loop ends (keep_asks_left). Plain functions on an int: held in an object with a
/// destructor, GCC 12 kept accumulate_columns' 16-bit accumulators in memory (1.4-1.7x as long).
template <class Next>
int asks_left(const Next* next) {
  return next && next->paced() ? next->countdown : 1 << 30;
}
/// One tick per load (the score passes).
template <class Next>
[[gnu::always_inline]] inline void tick_asks(Next* next, int& left) {
  if (--left == 0) {  // never without a paced NextTile: a loop ticks far fewer than 2^30 times
    left = next->spacing;
    next->ask_one();
  }
}
/// `loads` ticks at once, after a row's loads (the value pass): one test and one branch per row,
/// and as many lines asked as have come due (spacing may be below `loads`). Ticked per load, each
/// load had its own decrement and branch, and XCache f32's value pass on AVX2 (2 heads x 4 column
/// vectors a row) spent as many instructions on them as on its 8 multiply-adds. The score passes
/// tick this way where the heads share a key: score_slices' pass over one head's key (per pair of
/// rows) and score_rows' shared key (per block of rows). Head slices keep a tick per load: ticked
/// per row block in score_rows, SlimK2's took 1.2-1.4x as long on AVX2.
template <class Next>
[[gnu::always_inline]] inline void tick_asks(Next* next, int& left, int loads) {
  if ((left -= loads) <= 0) {  // never without a paced NextTile (see above)
    do {
      left += next->spacing;
      next->ask_one();
    } while (left <= 0);
  }
}
template <class Next>
void keep_asks_left(Next* next, int left) {
  if (next && next->paced()) next->countdown = left;
}

/// Where a tile's key rows are and how the group reads them.
template <class T, class Next = NextTile<>>
struct KeyTile {
  TileRows<T> rows;            // row j at rows[j] (the key's first element)
  std::ptrdiff_t group_stride; // head g reads its key at + g * group_stride (0: the group shares one key)
  int dim;                     // key_dim
  int count;                   // n <= kTile rows
  Next* next = nullptr;        // score_step(j) as row j is scored (nullptr: nothing to ask for)
};

/// Calls pass(std::bool_constant<Whole>) with Whole where the tile is whole (kTile rows), its rows
/// strided (Hnd, Nhd; not gathered from pages) and no unpaced asks are due (score_step does
/// nothing): then score_row finds each row from its index alone.
template <class T, class Next, class Pass>
[[gnu::always_inline]] inline void with_whole_tile(const KeyTile<T, Next>& keys, Pass&& pass) {
  if (!keys.rows.table && keys.count == kTile && !(keys.next && !keys.next->paced()))
    pass(std::true_type{});
  else
    pass(std::false_type{});
}

/// Row j of a score pass's tile (rows: a copy of keys.rows, kept in registers). Whole
/// (with_whole_tile): from its index, without the tile-end clamp, the gathered-row test or
/// score_step. Else rows past the tile repeat its last row (valid memory, scores unused), and a
/// row in the tile asks for the next tile's row j where the asks are unpaced.
template <bool Whole, class T, class Next>
[[gnu::always_inline]] inline const T* score_row(const TileRows<T>& rows, int j, const KeyTile<T, Next>& keys) {
  if constexpr (Whole) {
    return rows.first + rows.offset + std::ptrdiff_t(j) * rows.stride;
  } else {
    if (keys.next && j < keys.count) keys.next->score_step(j);
    return rows[std::min(j, keys.count - 1)];
  }
}

/// Makes the compiler hold b in a register: a vector loaded once for several multiply-adds is
/// otherwise folded into each of them as a memory operand (GCC 12), one load per multiply-add.
template <class B>
inline void keep_in_register(B& b) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm volatile("" : "+v"(b.data));
#else
  (void)b;
#endif
}

/// Makes the compiler address from p itself: loads at p + i * W then take constant displacements.
/// (Without it GCC 12 split a row's p = rows[j] + c into rows[j] and 8 loop-invariant offsets
/// c + i * W, which it kept on the stack: a load from the stack for each vector load of the row.
/// Seen in accumulate_columns' kLoneValueVectors pass over int8 rows; 16-bit rows are unmeasured
/// without it.)
template <class P>
[[gnu::always_inline]] inline void keep_pointer_in_register(P*& p) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+r"(p));
#else
  (void)p;
#endif
}

/// Rows scored together by score_rows for NG heads: R x NG accumulators, R keys and one query in
/// the vector registers, R a power of two up to 4 (it divides every SIMD width).
template <class Arch, int NG>
constexpr int rows_per_block() {
  for (int r = 4; r > 1; r /= 2)
    if (r * NG + r + 1 <= kVectorRegisters<Arch>) return r;
  return 1;
}

/// score_rows' R: a shared key of 4 heads or more, or GQA<2>'s 16-bit or int8 key, as many rows
/// as the registers hold (rows_per_block); GQA<2>'s float key 2 (bound by memory there, it took
/// 1.04-1.11x as long with 4); another shared key 1; head slices at most 2. Why: score_rows.
template <class Arch, int NG, bool SharedKey, class T>
constexpr int score_rows_per_block() {
  if constexpr (!SharedKey)
    return std::min(2, rows_per_block<Arch, NG>());
  else if constexpr (NG >= 4 || (NG == 2 && !std::is_same_v<T, float>))
    return rows_per_block<Arch, NG>();
  else
    return NG == 2 ? 2 : 1;
}

/// Scores of NG query heads (pre-scaled queries q[NG][dim], row stride q_stride) against the
/// rows of a tile, R rows at a time (score_rows_per_block): each query vector is loaded once for the R
/// rows and each key vector once for the NG heads (one key for all of them when the group shares
/// it: MQA, GQA, XCache, MLA; else head g's slice at g * group_stride: SlimK2's packed row), so
/// that the loads stay below the multiply-adds (one row at a time, XCache's 6 heads did 7 vector
/// loads per 6 multiply-adds, and its score pass took 2.4x its value pass for the same count on an
/// AMD EPYC Zen 4, which loads one 512-bit vector a cycle). The W dot products of a W-block of
/// tokens are reduced together by sum_each: no horizontal sum per token. Each row is read front
/// to back, the R rows side by side (adjacent rows of the tile: the hardware prefetchers still
/// see a forward stream); a register block of 8 rows (one head) read column-block by column-block
/// ran 1.3-1.5x slower on MHA and MQA with the cache in L3 or DRAM, and one head's slice across
/// all rows of the tile, then the next head's, 1.4x slower on SlimK2.
template <class Arch, int NG, bool SharedKey, class T, class Next>
void score_rows(const float* q, std::ptrdiff_t q_stride, const KeyTile<T, Next>& keys, float* scores) {
  using B = xsimd::batch<float, Arch>;
  // Why each choice (figures: bench/results/cpu_decode_variants/README.md, stops 90-92):
  //  - Rows per block (score_rows_per_block): one row at a time reloads each query vector for every
  //    row and leaves one chain of dim / W multiply-adds per head, too short for the out-of-order
  //    window: GQA<2>'s score pass took 2.5-4x MHA's per row in L1 that way (AMD EPYC Zen 3).
  //  - A shared key's loads tick the asks once per block of rows, with the same count (tick_asks
  //    with `loads`): a tick per load is a decrement and a branch per load, about a fifth of
  //    GQA<2>'s score pass in L1. Ticked per block, GQA<2>'s int8 and bfloat16 decode steps took
  //    0.82-1.04x (mostly 0.88-0.96; controls 0.95-1.02), MQA's and XCache's 0.92-1.08x (each run's
  //    median, 33 of 42 at or below 1.00; controls 1.00-1.03), in bench/ab pairs with the same sums.
  //    Head slices keep a tick per load.
  //  - GQA<2>'s float key is held in a register (keep_in_register): without the ticks' branches
  //    between its load and its multiply-adds, GCC 12 loaded it again for the second head.
  //  - Head slices (SlimK2's where score_slices does not take them: wider, or with a tail): 2 rows,
  //    each query vector loaded once for both; 4 rows did no better.
  // Each row keeps its order of summation whatever R is: the same sums. (GQA<2>'s half keys of 64
  // take the lone-key path instead: score_tile_fp32.)
  constexpr int W = int(B::size);
  constexpr int R = score_rows_per_block<Arch, NG, SharedKey, T>();
  const int dim_vec = keys.dim / W * W;
  const TileRows<T> rows = keys.rows;  // a local copy, which the asks' stores cannot change: kept in registers
  alignas(64) B partial[NG][W];
  int asks = asks_left(keys.next);
  for (int j0 = 0; j0 < keys.count; j0 += W) {
    const int m = std::min(W, keys.count - j0);
    for (int jj = 0; jj < W; jj += R) {
      const T* k[R];
      for (int r = 0; r < R; ++r) k[r] = score_row<false>(rows, j0 + jj + r, keys);
      B acc[R][NG];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) acc[r][g] = B(0.0f);
      if constexpr (SharedKey) {
        for (int c = 0; c < dim_vec; c += W) {
          B kv[R];
          POLYATTN_UNROLL
          for (int r = 0; r < R; ++r) {
            kv[r] = load_floats<Arch>(k[r] + c);
            if constexpr (NG == 2 && std::is_same_v<T, float>) keep_in_register(kv[r]);
          }
          for (int g = 0; g < NG; ++g) {
            B qv = B::load_unaligned(q + g * q_stride + c);
            if constexpr (R > 1) keep_in_register(qv);
            for (int r = 0; r < R; ++r) acc[r][g] = xsimd::fma(qv, kv[r], acc[r][g]);
          }
        }
        tick_asks(keys.next, asks, R * (dim_vec / W));  // the block's key loads at once
      } else {  // head g's slice of row r at k[r] + g * group_stride
        for (int c = 0; c < dim_vec; c += W)
          for (int g = 0; g < NG; ++g) {
            B qv = B::load_unaligned(q + g * q_stride + c);
            if constexpr (R > 1) keep_in_register(qv);
            POLYATTN_UNROLL
            for (int r = 0; r < R; ++r) {
              acc[r][g] = xsimd::fma(qv, load_floats<Arch>(k[r] + g * keys.group_stride + c), acc[r][g]);
              tick_asks(keys.next, asks);
            }
          }
      }
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) partial[g][jj + r] = acc[r][g];
    }
    for (int g = 0; g < NG; ++g) sum_each<Arch>(partial[g]).store_unaligned(scores + g * kTile + j0);
    if (dim_vec < keys.dim)  // key dims past the last full vector: scalar (17, 40, 72, ...)
      for (int jj = 0; jj < m; ++jj) {
        const T* k = rows[j0 + jj];
        for (int g = 0; g < NG; ++g) {
          const T* kg = k + (SharedKey ? 0 : g * keys.group_stride);
          float tail = 0.0f;
          for (int c = dim_vec; c < keys.dim; ++c) tail += q[g * q_stride + c] * element_value(kg[c]);
          scores[g * kTile + j0 + jj] += tail;
        }
      }
  }
  keep_asks_left(keys.next, asks);
}

/// Vector registers score_slices holds query vectors in; the rest hold a row's slice, the sums
/// and sum_each's tree.
template <class Arch>
inline constexpr int kSliceQueryRegisters = kVectorRegisters<Arch> - 8;

/// Query vectors per head up to which score_tile keeps head slices' queries in registers (key
/// dims up to 64 on AVX-512, 32 on AVX2); wider slices go through score_rows, and one head's key
/// of kLoneKeyVectors through score_slices.
inline constexpr int kMaxSliceVectors = 4;

/// Vectors of a key that one head reads alone (MHA's: a group of 1) that score_tile gives to
/// score_slices, its query vectors in registers, on AVX2: 8, a 64-wide key (8 + a sum + the
/// row's vectors of 16). Only that width, not 5-8 vectors: each width is one more instance for
/// every element type and tile source, and CI's builds are bound by their instances (see
/// kSharedRowHeads). score_rows, which took it before (64 = 8 AVX2 vectors is past
/// kMaxSliceVectors), loaded a query vector for every key vector. On an AMD EPYC Zen 3, MHA's
/// score pass (bench_decode_tile, one thread) took 0.62x the time in L1 (f32) and 0.45-0.64x in
/// L2 and DRAM (half); end to end (2 threads, L 65536, batch 16, best of 4 alternated pairs) MHA
/// half, bfloat16 and int8 took 0.89-0.92x on Hnd and half 0.80x on Paged<16>, f32 0.96-0.98x (an
/// unchanged GQA<2> 0.96x); at batch 1 all within the VM's noise. AVX-512 keeps
/// kMaxSliceVectors (unmeasured there for key dims of 80-128).
template <class Arch>
inline constexpr int kLoneKeyVectors = kVectorRegisters<Arch> == 16 ? 8 : kMaxSliceVectors;

/// Whether score_tile scores head slices (SlimK2's packed key row) of `key_dim` one head at a
/// time, each as a lone key of kLoneKeyVectors (score_slices, MHA's path: the head's query vectors
/// in registers, two rows an iteration): AVX2, slices of 64, float, half and int8 rows. score_rows, which
/// took them before (a query vector loaded for every 2 rows, 4 heads and then 2), spent about as
/// long on its block of 2 heads as on its block of 4 (perf), and SlimK2 half's score pass ran at
/// 0.11-0.13 of one core's multiply-add peak with its tile in L1 or L2 (bench_decode_tile). On an
/// AMD EPYC Zen 3 (bench/ab pairs, the same sums) SlimK2's decode steps took 0.79-0.86x (f32) and
/// 0.83-0.94x (half) on Hnd, Nhd and Paged<16> at L 65536, batch 16 on two threads, and 0.77-0.85x
/// and 0.86-0.90x on one core at L 1500, against 0.94-1.00x for the unchanged cases beside them
/// (decode log, 2026-12-06, stop 86). int8 codes first did no better (1.00x, and 1.1-1.4x for
/// the score pass alone) while that path ticked the asks after each load; ticked once per pair of
/// rows, SlimK2 int8's score pass took 0.74-0.81x the time (bench_decode_tile, one core, L1 and
/// L2) and its decode steps 0.79-0.83x on Paged<16> and 0.96-0.97x on Hnd and Nhd (bench/ab, two
/// threads, L 65536 and 1500, batch 16, the same sums; unchanged MHA and XCache int8 beside them
/// 0.98-1.05x). Not bfloat16 (its pairs of vectors, pair_loads, take score_slices' one-row path:
/// 1.11x in a first A/B): it keeps score_rows. Four rows an iteration did no better than two. The
/// slices reuse MHA's instance: no new kernel to compile.
template <class Arch, class T>
constexpr bool lone_head_slices(int key_dim) {
  return kLoneKeyVectors<Arch> > kMaxSliceVectors && !pair_loads<Arch, T>() &&
         key_dim == kLoneKeyVectors<Arch> * int(xsimd::batch<float, Arch>::size);
}

/// Heads score_slices takes at once for slices of NV vectors.
template <class Arch, int NV>
inline constexpr int kSliceHeads = std::min(8, kSliceQueryRegisters<Arch> / NV);

/// Scores of `heads` <= NG heads whose keys are NV whole vectors, row by row: slices of one row
/// (SlimK2's packed key row: head g's at g * group_stride), or one key the heads share (MHA, GQA,
/// MQA: SharedKey, group_stride 0, its NV vectors loaded once a row for all heads). The NG x NV
/// query vectors stay in registers for the whole tile, so a row costs each head NV multiply-adds
/// and no query load. (score_rows, which reloads each query vector every 2 rows, took 1.2-1.3x as
/// long on SlimK2's 6 heads of 64, f32 and f16, with the tile in L2; without sum_each the pass
/// would take 0.65x, about L2's bandwidth for its 1536-byte rows.) Heads past `heads` are
/// skipped by a test the compiler unrolls, which keeps the instances to one per NV for slices
/// (and three for a shared key: score_tile).
template <class Arch, int NG, int NV, bool SharedKey, class T, class Next>
void score_slices(const float* q, std::ptrdiff_t q_stride, int heads, const KeyTile<T, Next>& keys, float* scores) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  B qv[NG][NV];
  for (int g = 0; g < NG; ++g) {
    for (int i = 0; i < NV; ++i) {
      qv[g][i] = g < heads ? B::load_unaligned(q + g * q_stride + i * W) : B(0.0f);
      if constexpr (!pair_loads<Arch, T>()) keep_in_register(qv[g][i]);
    }
    if constexpr (pair_loads<Arch, T>()) {  // in the lanes of the keys' vectors (load_row_vectors)
      to_row_order<Arch, T, NV>(qv[g]);
      for (int i = 0; i < NV; ++i) keep_in_register(qv[g][i]);
    }
  }
  const TileRows<T> rows = keys.rows;  // a local copy, which the asks' stores cannot change: kept in registers
  alignas(64) B partial[NG][W];
  int asks = asks_left(keys.next);
  if constexpr (SharedKey && NG == 1 && !pair_loads<Arch, T>()) {
    // One head's own key (MHA): two rows an iteration, their multiply-add chains interleaved. One
    // row's NV multiply-adds are a serial chain (NV x the FMA latency), so the out-of-order window
    // has to overlap several rows' chains. Each row keeps its own order of summation: the same
    // bits as one row at a time. On an AMD EPYC Zen 3 the pass took 0.83-0.87x in L1
    // (bench_decode_tile, one core) and MHA's decode steps 0.92x (half) and 0.96x (int8) on two
    // threads at L 65536, batch 16 (bench/ab; f32, bound by memory, 1.00x).
    // The asks are ticked once per pair of rows, not after each load: a row of 8 vectors has only
    // 8 multiply-adds, and 16 decrements and branches per pair held the window. Then the pass took
    // 0.36-0.66x the time with its tile in L1 or L2 (f32, half, int8; bench_decode_tile, one core,
    // 2 alternated runs), SlimK2's slices 0.46-0.85x, and the decode steps (bench/ab, AMD EPYC Zen
    // 3, two threads, L 65536 and 1500, batch 16, the same sums) 0.90-0.97x for MHA int8,
    // 0.93-0.98x for SlimK2 half, 0.96-1.01x for MHA half and 1.00-1.02x for f32, against
    // 0.98-1.01x for unchanged cases beside them.
    // Whole tiles (with_whole_tile): on an AMD EPYC Zen 3 (bench/ab, the same sums) the decode
    // steps took, on one core at L 1500, batch 16: MHA int8 0.87x (Hnd) and 0.89x (Nhd), SlimK2
    // int8 0.88x, SlimK2 half 0.96x, MHA half and f32 0.99x; on two threads at L 65536, batch 16
    // (2 runs): MHA int8 0.94-0.97x, SlimK2 int8 0.87-0.92x, SlimK2 half 0.90-0.97x, MHA half
    // 1.00-1.03x, f32 1.01-1.06x; an unchanged MHA bfloat16 beside them 0.99-1.06x. Paged<16>'s
    // gathered rows keep the clamped loop (table[j] without the clamp read 0.95-1.00x there, and
    // cost Hnd part of its gain; decode log, 2026-12-07, stop 90).
    with_whole_tile(keys, [&](auto whole) {
      constexpr bool Whole = decltype(whole)::value;
      for (int j0 = 0; j0 < keys.count; j0 += W) {
        for (int jj = 0; jj < W; jj += 2) {
          const T* k0 = score_row<Whole>(rows, j0 + jj, keys);
          const T* k1 = score_row<Whole>(rows, j0 + jj + 1, keys);
          B acc0 = qv[0][0] * load_floats<Arch>(k0);
          B acc1 = qv[0][0] * load_floats<Arch>(k1);
          POLYATTN_UNROLL
          for (int i = 1; i < NV; ++i) {
            acc0 = xsimd::fma(qv[0][i], load_floats<Arch>(k0 + i * W), acc0);
            acc1 = xsimd::fma(qv[0][i], load_floats<Arch>(k1 + i * W), acc1);
          }
          tick_asks(keys.next, asks, 2 * NV);
          partial[0][jj] = acc0;
          partial[0][jj + 1] = acc1;
        }
        sum_each<Arch>(partial[0]).store_unaligned(scores + j0);
      }
    });
  } else {  // (an else, not a return above: nvcc warns that the loop after it is unreachable)
    for (int j0 = 0; j0 < keys.count; j0 += W) {
      for (int jj = 0; jj < W; ++jj) {
        const T* k = score_row<false>(rows, j0 + jj, keys);
        B kv[SharedKey ? NV : 1];
        // bfloat16 reads a pair of vectors a load (load_row_vectors), then ticks once for the row's
        // NV loads (MHA's key on AVX2: ticked after each, 8 decrements and branches a row of 8
        // multiply-adds); the other types keep a tick after each load, and with it the
        // instructions they had before the pair loads (their cases were the A/B's controls:
        // load_floats.hpp, pair_loads). Ticked once, MHA bfloat16's score pass took 0.65-0.77x the
        // time in L1 (bench_decode_tile, one core, 3 alternated runs), and its decode steps
        // 0.90-0.93x on Paged<16> and 0.99-1.01x on Hnd and Nhd (AMD EPYC Zen 3, bench/ab, L 65536,
        // batch 16, the same sums), where an unchanged GQA<2> bfloat16 read 1.03-1.07x.
        if constexpr (SharedKey && pair_loads<Arch, T>()) {
          load_row_vectors<Arch, NV>(k, kv);
          tick_asks(keys.next, asks, NV);
        } else if constexpr (SharedKey) {
          POLYATTN_UNROLL
          for (int i = 0; i < NV; ++i) kv[i] = load_floats<Arch>(k + i * W), tick_asks(keys.next, asks);
        }
        const auto key = [&](int g, int i) {
          if constexpr (SharedKey)
            return kv[i];
          else
            return load_floats<Arch>(k + g * keys.group_stride + i * W);
        };
        // Unrolled whole, so that qv[g] is a register: left rolled (GCC 12, SlimK2's slices), the
        // loop indexed qv in memory, the queries were kept on the stack and each multiply-add loaded
        // one. Unrolled, SlimK2's score pass took 0.80 of the time with its tile resident (f32 and
        // half, bench_decode_tile, one core of the 480 MiB Xeon), and its decode steps 0.95-0.99
        // (f32, f16, int8; Hnd, L 65536, batch 16; bench/ab, controls 1.01-1.02, the same sums).
        POLYATTN_UNROLL
        for (int g = 0; g < NG; ++g) {
          if (g >= heads) break;
          B acc;
          if constexpr (!SharedKey && pair_loads<Arch, T>()) {  // head g's slice, two vectors a load (load_row_vectors)
            B slice[NV];
            load_row_vectors<Arch, NV>(k + g * keys.group_stride, slice);
            acc = qv[g][0] * slice[0];
            for (int i = 1; i < NV; ++i) acc = xsimd::fma(qv[g][i], slice[i], acc);
          } else {
            acc = qv[g][0] * key(g, 0);
            for (int i = 1; i < NV; ++i) acc = xsimd::fma(qv[g][i], key(g, i), acc);
          }
          partial[g][jj] = acc;
          if constexpr (!SharedKey) {  // a tick per load of the head's slice
            POLYATTN_UNROLL
            for (int i = 0; i < NV; ++i) tick_asks(keys.next, asks);
          }
        }
      }
      for (int g = 0; g < heads; ++g) sum_each<Arch>(partial[g]).store_unaligned(scores + g * kTile + j0);
    }
  }
  keep_asks_left(keys.next, asks);
}

/// Calls f(g0, heads, block) for each block of up to `per_block` heads of a group, g0 its first
/// head: `block` is the tile as head g0 reads it (its slice of the row at g0 * group_stride), and
/// only the first block asks for the next tile.
template <class T, class Next, class F>
void for_each_head_block(int group, int per_block, const KeyTile<T, Next>& keys, F&& f) {
  for (int g0 = 0; g0 < group; g0 += per_block) {
    KeyTile<T, Next> block = keys;
    block.rows = keys.rows.plus(g0 * keys.group_stride);
    if (g0 > 0) block.next = nullptr;
    f(g0, std::min(per_block, group - g0), block);
  }
}

/// Heads score_rows takes in one block. AVX-512: 8 (2 rows: 16 sums, 2 keys and a query of 32
/// registers). AVX2 (16 registers): 4, and 6 for a key the heads share where the group is a
/// multiple of 6 (2 rows: 12 + 2 + 1), so that XCache's and MQA's 6 heads (Whisper tiny's) are
/// scored in one pass over the tile. In blocks of 4, 6 heads took two passes, 4 heads on 2 rows
/// and then 2 on 1 row, reading each key row twice (a 384-wide tile of 64 rows, 96 KiB, is past a
/// Zen 3's 32 KiB L1): in one pass XCache took 0.79-0.86x the time (f32, half, int8; Hnd and
/// Paged<16>) and MQA 0.84-0.88x (AMD EPYC Zen 3, 2 threads, L 65536, batch 16, best of 6
/// alternated runs). SlimK2 half's slices, 6 to a block, took 1.10x (f32 1.02x), so they stay at 4.
/// One block size more, not every size up to 6: each is compiled for every element type and
/// tile source, and CI's builds on 2 cores are bound by that work. (A fresh CI with sizes 5 and
/// 6 and lone keys of 5-8 vectors, kLoneKeyVectors, built its optimised pass 1.12x as long, but
/// the units without these kernels took 1.2x too: the VM, not measured as the instances' cost.)
template <class Arch>
inline constexpr int kRowHeads = kVectorRegisters<Arch> == 32 ? 8 : 4;
template <class Arch>
inline constexpr int kSharedRowHeads = kVectorRegisters<Arch> == 32 ? 8 : 6;

/// Heads of each score_rows block for a group (the last block takes the rest).
template <class Arch, bool SharedKey>
constexpr int row_heads_per_block(int group) {
  return SharedKey && group % kSharedRowHeads<Arch> == 0 ? kSharedRowHeads<Arch> : kRowHeads<Arch>;
}

/// The architecture whose kernels a reduced-precision policy (avx512bf16_scores,
/// avx512vnni_scores) runs wherever it changes nothing: avx512bw's. Its passes call those
/// instances (compiled once where tile_instances.hpp's macros are: the value pass, prefill's
/// block kernel, the fp32 score pass of the keys the policy leaves unrounded) instead of a copy
/// of each compiled under the policy's name, the same instructions. Any other architecture is its
/// own. In the tests' release build (a fresh clone, 2 jobs, AMD EPYC Zen 4 VM) the units that run
/// the policies took 0.51-0.62x as long: test_bf16_scores 79 s (127 before), test_int8_scores 53
/// (95), test_dispatch_cpu 69 (133) and its AVX-512 kernels 47 (107).
template <class Arch>
struct default_kernels {
  using type = Arch;
};
template <>
struct default_kernels<avx512bf16_scores> {
  using type = xsimd::avx512bw;
};
template <>
struct default_kernels<avx512vnni_scores> {
  using type = xsimd::avx512bw;
};
template <class Arch>
using default_kernels_t = typename default_kernels<Arch>::type;

/// score_tile for the avx512bf16_scores and avx512vnni_scores policies: defined below only where
/// the unit can hold their kernels (POLYATTN_HAS_BF16_SCORES, POLYATTN_HAS_INT8_SCORES), declared
/// everywhere so that score_tile reads the same in
/// every translation unit, whatever its ISA (one definition of each kernel across a program's
/// units).
template <class Arch, class T, class Next>
void score_tile_by_dot(const float* q, int group, const KeyTile<T, Next>& keys, float* scores);

#if POLYATTN_HAS_BF16_SCORES
/// One 32-element chunk of the bfloat16 dot products of score_rows_bf16_dot: acc[r][g] +=
/// q~_g[c..c+32) . row r's key (head g's slice where the heads do not share it), `tail` the
/// chunk's elements (a masked load reads no element past the key), `ticks` the fp32 vectors it
/// stands for in the paced asks (score_loads_per_row counts those).
template <int R, int NG, bool SharedKey, bool Masked, class Next>
[[gnu::target("avx512bf16"), gnu::always_inline]] inline void dot_chunk(const std::uint16_t* qb, std::ptrdiff_t q_stride,
                                                                        const Eigen::bfloat16* const* k, std::ptrdiff_t group_stride,
                                                                        __mmask32 tail, int ticks, Next* next, int& asks,
                                                                        __m512 (&acc)[R][NG]) {
  // (A whole chunk by a plain load, which the compiler may fold into the dot product.)
  const auto load = [tail](const Eigen::bfloat16* p) { return Masked ? _mm512_maskz_loadu_epi16(tail, p) : _mm512_loadu_si512(p); };
  if constexpr (SharedKey) {
    __m512i kv[R];
    POLYATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      kv[r] = load(k[r]);
      for (int t = 0; t < ticks; ++t) tick_asks(next, asks);
    }
    POLYATTN_UNROLL
    for (int g = 0; g < NG; ++g) {
      const __m512bh qv = (__m512bh)_mm512_load_si512(qb + g * q_stride);
      POLYATTN_UNROLL
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], qv, (__m512bh)kv[r]);
    }
  } else {
    POLYATTN_UNROLL
    for (int g = 0; g < NG; ++g) {
      const __m512bh qv = (__m512bh)_mm512_load_si512(qb + g * q_stride);
      POLYATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        acc[r][g] = _mm512_dpbf16_ps(acc[r][g], qv, (__m512bh)load(k[r] + g * group_stride));
        for (int t = 0; t < ticks; ++t) tick_asks(next, asks);
      }
    }
  }
}

/// score_rows for the avx512bf16_scores policy (exec/cpu/bf16_scores.hpp): scores of NG heads
/// against bfloat16 keys by vdpbf16ps, each instruction 32 exact products of the key's bits and
/// the head's rounded query summed into 16 fp32 lanes, then sum_each as in score_rows. `q`: the
/// heads' scaled queries in fp32, row stride q_stride, rounded here to bfloat16 (the policy's one
/// rounding) as they are packed into 32-element chunks (zero past the key's last element); the
/// rows R at a time as score_rows takes them.
template <class Arch, int NG, bool SharedKey, class Next>
[[gnu::target("avx512bf16")]] void score_rows_bf16_dot(const float* q, std::ptrdiff_t q_stride, const KeyTile<Eigen::bfloat16, Next>& keys,
                                                       float* scores) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  constexpr int R = SharedKey ? (NG >= 4 ? rows_per_block<Arch, NG>() : 1) : std::min(2, rows_per_block<Arch, NG>());
  const int whole = keys.dim / 32, rest = keys.dim % 32, chunks = whole + (rest > 0);
  const __mmask32 all = ~__mmask32(0), tail = rest ? __mmask32((1u << rest) - 1) : all;
  const int tail_ticks = rest / W;  // as score_loads_per_row counts a key's vectors: whole ones
  // The packed queries: head g's chunk c at qb + (g * chunks + c) * 32 (vcvtne2ps2bf16: to
  // nearest, ties to even, as round_to_bfloat16 but for elements under 2^-126, flushed to 0).
  // Once per tile: XCache's 6 heads of 384 take 72 conversions, against 4608 dot products a tile.
  thread_local polyattn::detail::CacheLineVector<std::uint16_t> packed;
  packed.resize(std::size_t(NG) * std::size_t(chunks) * 32);  // every element written below
  std::uint16_t* const qb = packed.data();
  for (int g = 0; g < NG; ++g)
    for (int c = 0; c < chunks; ++c) {
      const int n = std::min(32, keys.dim - c * 32);
      const __mmask16 lo = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
      const __mmask16 hi = n >= 32 ? __mmask16(0xffff) : n > 16 ? __mmask16((1u << (n - 16)) - 1) : __mmask16(0);
      const float* src = q + g * q_stride + c * 32;
      const __m512 a = _mm512_maskz_loadu_ps(lo, src), b = hi ? _mm512_maskz_loadu_ps(hi, src + 16) : _mm512_setzero_ps();
      _mm512_store_si512(qb + (std::ptrdiff_t(g) * chunks + c) * 32, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  const TileRows<Eigen::bfloat16> rows = keys.rows;  // a local copy, kept in registers (score_rows)
  alignas(64) B partial[NG][W];
  int asks = asks_left(keys.next);
  for (int j0 = 0; j0 < keys.count; j0 += W) {
    for (int jj = 0; jj < W; jj += R) {
      const Eigen::bfloat16* k[R];
      for (int r = 0; r < R; ++r) k[r] = score_row<false>(rows, j0 + jj + r, keys);
      __m512 acc[R][NG];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_setzero_ps();
      for (int c = 0; c < whole; ++c) {
        const Eigen::bfloat16* kc[R];
        for (int r = 0; r < R; ++r) kc[r] = k[r] + c * 32;
        dot_chunk<R, NG, SharedKey, false>(qb + c * 32, std::ptrdiff_t(chunks) * 32, kc, keys.group_stride, all, 2, keys.next, asks, acc);
      }
      if (rest) {
        const Eigen::bfloat16* kc[R];
        for (int r = 0; r < R; ++r) kc[r] = k[r] + whole * 32;
        dot_chunk<R, NG, SharedKey, true>(qb + whole * 32, std::ptrdiff_t(chunks) * 32, kc, keys.group_stride, tail, tail_ticks, keys.next,
                                    asks, acc);
      }
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) partial[g][jj + r] = B(acc[r][g]);
    }
    for (int g = 0; g < NG; ++g) sum_each<Arch>(partial[g]).store_unaligned(scores + g * kTile + j0);
  }
  keep_asks_left(keys.next, asks);
}

#endif

#if POLYATTN_HAS_INT8_SCORES
/// One 64-element chunk of the int8 dot products of score_rows_int8_dot: acc[r][g] += sum of
/// c_g[i] (k_r[i] + 128) over the chunk, c_g head g's query codes, k_r row r's key codes (head
/// g's slice where the heads do not share the key), offset by an xor of their sign bits, as
/// vpdpbusd takes an unsigned operand. `tail` the chunk's codes (a masked load reads none past the
/// key; the zeros it gives meet query codes of 0), `ticks` the fp32 vectors it stands for in the
/// paced asks (score_loads_per_row counts those).
template <int R, int NG, bool SharedKey, bool Masked, class Next>
[[gnu::target("avx512vnni"), gnu::always_inline]] inline void int8_dot_chunk(const std::int8_t* qc, std::ptrdiff_t q_stride,
                                                                             const std::int8_t* const* k, std::ptrdiff_t group_stride,
                                                                             __mmask64 tail, int ticks, Next* next, int& asks,
                                                                             __m512i (&acc)[R][NG]) {
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  const auto load = [tail, sign](const std::int8_t* p) {
    return _mm512_xor_si512(Masked ? _mm512_maskz_loadu_epi8(tail, p) : _mm512_loadu_si512(p), sign);
  };
  if constexpr (SharedKey) {
    __m512i kv[R];
    POLYATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      kv[r] = load(k[r]);
      for (int t = 0; t < ticks; ++t) tick_asks(next, asks);
    }
    POLYATTN_UNROLL
    for (int g = 0; g < NG; ++g) {
      const __m512i qv = _mm512_load_si512(qc + g * q_stride);
      POLYATTN_UNROLL
      for (int r = 0; r < R; ++r) acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], kv[r], qv);
    }
  } else {
    POLYATTN_UNROLL
    for (int g = 0; g < NG; ++g) {
      const __m512i qv = _mm512_load_si512(qc + g * q_stride);
      POLYATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], load(k[r] + g * group_stride), qv);
        for (int t = 0; t < ticks; ++t) tick_asks(next, asks);
      }
    }
  }
}

/// score_rows for the avx512vnni_scores policy (exec/cpu/int8_scores.hpp): NG heads' scores
/// against int8 key codes by vpdpbusd, each instruction 64 byte products summed exactly into 16
/// int32 lanes; the lanes in fp32 through sum_each as in score_rows (exact integers while the sums
/// stay under 2^24), then (sum - 128 sum_i c_g[i]) times head g's step. `q`: the heads' scaled
/// queries in fp32, row stride q_stride, rounded here to codes (QueryCodes, the policy's one
/// rounding) as they are packed into 64-element chunks (zero past the key's last element); the
/// rows R at a time as score_rows takes them.
template <class Arch, int NG, bool SharedKey, class Next>
[[gnu::target("avx512vnni")]] void score_rows_int8_dot(const float* q, std::ptrdiff_t q_stride, const KeyTile<std::int8_t, Next>& keys,
                                                       float* scores) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  // 2 rows at most: with score_rows' 4 for 6 heads of a shared key (24 accumulators, 4 keys, the
  // query and the sign bits), GCC 12 kept the accumulators on the stack, and XCache's pass over
  // keys of 384 took 1.6-1.7x as long (one core, tile in L1; bench_decode_tile's set-up).
  constexpr int R = SharedKey ? (NG >= 4 ? 2 : 1) : std::min(2, rows_per_block<Arch, NG>());
  const int whole = keys.dim / 64, rest = keys.dim % 64, chunks = whole + (rest > 0);
  const __mmask64 all = ~__mmask64(0), tail = rest ? (__mmask64(1) << rest) - 1 : all;
  const int tail_ticks = rest / W;  // as score_loads_per_row counts a key's vectors: whole ones
  // The packed codes: head g's chunk c at qc + (g * chunks + c) * 64, with each head's step and
  // offset; kept for the next tile while the queries are the same (compared by their bits, so
  // that a tile never scores with another query's codes). A step's tiles of one sequence and
  // block of heads share them: packing them per tile, MQA's score pass over keys of 64 took 2.5x
  // the default's time at one block of 16 rows and 1.4x at a whole tile (one core, tile in L1).
  struct Packed {
    std::vector<float> source;  // the queries packed, NG rows of dim
    polyattn::detail::CacheLineVector<std::int8_t> codes;
    float step[NG], offset[NG];
    int dim = -1;
  };
  thread_local Packed packed;
  bool same = packed.dim == keys.dim;
  for (int g = 0; same && g < NG; ++g)
    same = std::memcmp(packed.source.data() + std::ptrdiff_t(g) * keys.dim, q + g * q_stride, sizeof(float) * std::size_t(keys.dim)) == 0;
  if (!same) {
    packed.dim = keys.dim;
    packed.source.resize(std::size_t(NG) * std::size_t(keys.dim));
    packed.codes.resize(std::size_t(NG) * std::size_t(chunks) * 64);  // every element written below
    const auto lanes = [&](int e) { return e >= 16 ? __mmask16(0xffff) : e > 0 ? __mmask16((1u << e) - 1) : __mmask16(0); };
    for (int g = 0; g < NG; ++g) {
      const float* src = q + g * q_stride;
      std::memcpy(packed.source.data() + std::ptrdiff_t(g) * keys.dim, src, sizeof(float) * std::size_t(keys.dim));
      __m512 largest = _mm512_setzero_ps();
      __mmask16 unordered = 0;
      for (int i = 0; i < keys.dim; i += 16) {
        const __m512 x = _mm512_maskz_loadu_ps(lanes(keys.dim - i), src + i);
        largest = _mm512_max_ps(largest, _mm512_abs_ps(x));
        unordered |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      }
      // (Lanes summed and compared through memory: GCC 12 warns of the undefined halves in
      // _mm512_reduce_*'s extracts.)
      alignas(64) float lane_max[16];
      _mm512_store_ps(lane_max, largest);
      const QueryCodes codes = QueryCodes::of(unordered ? NAN : *std::max_element(lane_max, lane_max + 16));
      const __m512 inverse = _mm512_set1_ps(codes.inverse);
      __m512i code_sum = _mm512_setzero_si512();
      for (int c = 0; c < chunks; ++c) {
        __m512i chunk = _mm512_setzero_si512();
        for (int v = 0; v < 4; ++v) {  // nearest, ties to even (the MXCSR's mode), as QueryCodes::code
          const int at = c * 64 + v * 16;
          const __m512i x = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(keys.dim - at), src + at), inverse));
          code_sum = _mm512_add_epi32(code_sum, x);
          chunk = _mm512_inserti32x4(chunk, _mm512_cvtsepi32_epi8(x), 0);
          chunk = _mm512_alignr_epi32(chunk, chunk, 4);  // rotate: the four quarters end in order
        }
        _mm512_store_si512(packed.codes.data() + (std::ptrdiff_t(g) * chunks + c) * 64, chunk);
      }
      packed.step[g] = codes.step;
      alignas(64) std::int32_t lane_sum[16];
      _mm512_store_si512(lane_sum, code_sum);
      std::int32_t sum = 0;
      for (const std::int32_t x : lane_sum) sum += x;
      packed.offset[g] = 128.0f * float(sum);
    }
  }
  const std::int8_t* const qc = packed.codes.data();
  const float* const step = packed.step;
  const float* const offset = packed.offset;
  const TileRows<std::int8_t> rows = keys.rows;  // a local copy, kept in registers (score_rows)
  alignas(64) B partial[NG][W];
  int asks = asks_left(keys.next);
  for (int j0 = 0; j0 < keys.count; j0 += W) {
    for (int jj = 0; jj < W; jj += R) {
      const std::int8_t* k[R];
      for (int r = 0; r < R; ++r) k[r] = score_row<false>(rows, j0 + jj + r, keys);
      __m512i acc[R][NG];
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) acc[r][g] = _mm512_setzero_si512();
      for (int c = 0; c < whole; ++c) {
        const std::int8_t* kc[R];
        for (int r = 0; r < R; ++r) kc[r] = k[r] + c * 64;
        int8_dot_chunk<R, NG, SharedKey, false>(qc + c * 64, std::ptrdiff_t(chunks) * 64, kc, keys.group_stride, all, 4, keys.next, asks, acc);
      }
      if (rest) {
        const std::int8_t* kc[R];
        for (int r = 0; r < R; ++r) kc[r] = k[r] + whole * 64;
        int8_dot_chunk<R, NG, SharedKey, true>(qc + whole * 64, std::ptrdiff_t(chunks) * 64, kc, keys.group_stride, tail, tail_ticks,
                                               keys.next, asks, acc);
      }
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < NG; ++g) partial[g][jj + r] = B(_mm512_cvtepi32_ps(acc[r][g]));
    }
    for (int g = 0; g < NG; ++g) ((sum_each<Arch>(partial[g]) - B(offset[g])) * B(step[g])).store_unaligned(scores + g * kTile + j0);
  }
  keep_asks_left(keys.next, asks);
}

/// score_tile for the reduced-precision policies (avx512bf16_scores over bfloat16 keys,
/// avx512vnni_scores over int8 keys): every group in blocks of up to 8 heads
/// (row_heads_per_block's, as score_rows takes them), each block by the policy's score_rows.
template <class Arch, class T, class Next>
void score_tile_by_dot(const float* q, int group, const KeyTile<T, Next>& keys, float* scores) {
  const auto by_blocks = [&]<bool SharedKey>(std::bool_constant<SharedKey>) {
    for_each_head_block(group, row_heads_per_block<Arch, SharedKey>(group), keys, [&](int g0, int heads, const KeyTile<T, Next>& block) {
      with_count<kSharedRowHeads<Arch>>(heads, [&](auto ng) {
        constexpr int NG = decltype(ng)::value;
        if constexpr (std::is_same_v<T, std::int8_t>)
          score_rows_int8_dot<Arch, NG, SharedKey>(q + g0 * keys.dim, keys.dim, block, scores + g0 * kTile);
        else
          score_rows_bf16_dot<Arch, NG, SharedKey>(q + g0 * keys.dim, keys.dim, block, scores + g0 * kTile);
      });
    });
  };
  if (keys.group_stride == 0)
    by_blocks(std::true_type{});
  else
    by_blocks(std::false_type{});
}
#endif

/// scores[g][j] for all `group` heads (queries q[group][key_dim]): keys of up to
/// kMaxSliceVectors whole vectors (kLoneKeyVectors for one head's own key) by score_slices (head
/// slices, or a key the heads share), in blocks of kSliceHeads heads, else in blocks of
/// row_heads_per_block heads by score_rows. A shared
/// key's groups of 1 and 2 heads (MHA, GQA<2>) get instances of their own, so that no register
/// holds an unused head's query. Before, score_rows took shared keys of any width: with its query
/// reloaded for every row, MHA's score pass took 1.5-1.6x as long with its tile in L1 or L2 (key
/// dim 64, f32 and f16, one core; bench_decode_tile).
///
/// Never inlined: GCC 12 kept it a call for a tile of one run (NextTile<1>) but inlined it into
/// attend_chunk for tiles gathered from pages (NextTile<kTileRuns>), and there int8 MHA's steps on
/// Paged<16> took 1.26x Hnd's (one core, in the L3). A call, against inlined: MHA int8 on Paged<16>
/// took 0.84x (one core, L 1500, batch 16) and 0.85x (two threads, L 65536, batch 16), GQA<2> int8
/// 0.86x, MHA half 0.96x, MHA f32 1.00x (pairs of bench/ab; AMD EPYC Zen 3, the same sums; unmeasured
/// on AVX-512; decode log, 2026-12-06, stop 85).
template <class Arch, class T, class Next>
[[gnu::noinline]] void score_tile_fp32(const float* q, int group, const KeyTile<T, Next>& keys, float* scores) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  if constexpr (kLoneKeyVectors<Arch> > kMaxSliceVectors) {
    if (group == 1 && keys.group_stride == 0 && keys.dim == kLoneKeyVectors<Arch> * W)
      return score_slices<Arch, 1, kLoneKeyVectors<Arch>, true>(q, keys.dim, 1, keys, scores);
    // Heads scored one at a time, each as a lone key (its query vectors in registers):
    //  - SlimK2's slices (see lone_head_slices). Every head's pass ticks the paced asks
    //    (score_loads_per_row counts them); unpaced, only the first asks (for_each_head_block).
    //  - GQA<2>'s half keys of kLoneKeyVectors: the second pass reads rows the first brought into
    //    L1 (16 loads and conversions of the key per row for 16 multiply-adds), where score_rows
    //    then loaded both heads' query vectors for every row (16 loads of them and 8 of the key,
    //    converted once). Only the first pass asks (score_loads_per_row counts the shared key's
    //    loads once). The same sums. On an AMD EPYC Zen 3 (bench/ab, two threads, L 65536, batch
    //    16, 3 runs) GQA<2> half took 0.95-0.98x on Hnd, 0.84-0.87x on Paged<16> and 1.00x on Nhd
    //    (one run); float (bound by memory) 1.07x, bfloat16 (pair loads, other sums) 1.07x and
    //    int8 1.00-1.02x, so they keep score_rows; MHA half beside them 0.99-1.00x. Since
    //    score_rows takes GQA<2> two rows a block (stop 90) this case is nearly even with it:
    //    half through score_rows read 1.00x (Hnd), 1.03x (Paged<16>) and 1.06x (Nhd), the same
    //    sums, against 0.98x for MHA half (one run, same set-up), and 0.96-1.03x again at stop 91;
    //    but on one core at L 1500, bound by arithmetic, 1.02-1.32x (three runs): so it stays.
    const bool slices = lone_head_slices<Arch, T>(keys.dim) && keys.group_stride != 0;
    const bool shared_by_two =
        std::is_same_v<T, Eigen::half> && group == 2 && keys.group_stride == 0 && keys.dim == kLoneKeyVectors<Arch> * W;
    if (slices || shared_by_two)
      return for_each_head_block(group, 1, keys, [&](int g, int, KeyTile<T, Next> head) {
        head.group_stride = 0;
        if (slices && keys.next && keys.next->paced()) head.next = keys.next;
        score_slices<Arch, 1, kLoneKeyVectors<Arch>, true>(q + g * keys.dim, keys.dim, 1, head, scores + g * kTile);
      });
  }
  if (keys.dim % W == 0 && keys.dim / W <= kMaxSliceVectors)
    return with_count<kMaxSliceVectors>(keys.dim / W, [&](auto nv) {
      constexpr int NV = decltype(nv)::value, NG = kSliceHeads<Arch, NV>;
      if (keys.group_stride == 0 && group <= 2)
        return with_count<2>(group, [&](auto ng) { score_slices<Arch, decltype(ng)::value, NV, true>(q, keys.dim, group, keys, scores); });
      for_each_head_block(group, NG, keys, [&](int g0, int heads, const KeyTile<T, Next>& block) {
        if (keys.group_stride == 0)
          score_slices<Arch, NG, NV, true>(q + g0 * keys.dim, keys.dim, heads, block, scores + g0 * kTile);
        else
          score_slices<Arch, NG, NV, false>(q + g0 * keys.dim, keys.dim, heads, block, scores + g0 * kTile);
      });
    });
  const auto by_row_blocks = [&]<bool SharedKey>(std::bool_constant<SharedKey>) {
    for_each_head_block(group, row_heads_per_block<Arch, SharedKey>(group), keys, [&](int g0, int heads, const KeyTile<T, Next>& block) {
      const auto rows = [&](auto ng) {
        score_rows<Arch, decltype(ng)::value, SharedKey>(q + g0 * keys.dim, keys.dim, block, scores + g0 * kTile);
      };
      if constexpr (SharedKey && kSharedRowHeads<Arch> > kRowHeads<Arch>)
        if (heads == kSharedRowHeads<Arch>) return rows(std::integral_constant<int, kSharedRowHeads<Arch>>{});
      with_count<kRowHeads<Arch>>(heads, rows);
    });
  };
  if (keys.group_stride == 0)
    by_row_blocks(std::true_type{});
  else
    by_row_blocks(std::false_type{});
}

/// scores[g][j] for all `group` heads of a tile: score_tile_fp32, or for the bfloat16 keys the
/// avx512bf16_scores policy takes (bf16_dot_key) and the int8 keys the avx512vnni_scores policy
/// takes (int8_dot_key) score_tile_by_dot.
/// (A policy's other keys go to avx512bw's score_tile: default_kernels.)
template <class Arch, class T, class Next>
void score_tile(const float* q, int group, const KeyTile<T, Next>& keys, float* scores) {
  if constexpr (bf16_dot_scores<Arch, T>())
    if (bf16_dot_key(keys.dim)) return score_tile_by_dot<Arch>(q, group, keys, scores);
  if constexpr (int8_dot_scores<Arch, T>())
    if (int8_dot_key(keys.dim)) return score_tile_by_dot<Arch>(q, group, keys, scores);
  if constexpr (std::is_same_v<default_kernels_t<Arch>, Arch>)
    score_tile_fp32<Arch>(q, group, keys, scores);
  else
    score_tile<default_kernels_t<Arch>>(q, group, keys, scores);
}

/// Vector loads of each row of a tile in score_tile's pass that asks for the next tile (its
/// first block of heads; every head where lone_head_slices): the key's whole vectors once where
/// the heads share it, else each head's slice: the pass's ticks (tick_asks).
template <class Arch, class T>
constexpr int score_loads_per_row(int group, int key_dim, bool shared_key) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  const int vectors = key_dim / W;
  if (shared_key || vectors == 0) return vectors;
  if (lone_head_slices<Arch, T>(key_dim)) return group * vectors;  // every head's pass
  const bool slices = key_dim % W == 0 && vectors <= kMaxSliceVectors;
  const int block = slices ? std::min(8, kSliceQueryRegisters<Arch> / vectors) : row_heads_per_block<Arch, false>(group);
  return std::min(group, block) * vectors;
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
template <class Arch, int NG, int NC, class T, bool ByToken, class Next = NextTile<>>
void accumulate_columns(const float* w, WeightIndex<ByToken> at, TileRows<T> rows, int n, float* acc, int acc_stride, int c,
                        Next* next = nullptr) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  // Decode reads bfloat16 rows two vectors a load (load_row_vectors), its accumulators in the
  // same lanes while the rows pass.
  constexpr bool pairs = !ByToken && pair_loads<Arch, T>();
  B a[NG][NC];
  for (int g = 0; g < NG; ++g) {
    for (int i = 0; i < NC; ++i) a[g][i] = B::load_unaligned(acc + g * acc_stride + c + i * W);
    if constexpr (pairs) to_row_order<Arch, T, NC>(a[g]);
  }
  int asks = asks_left(next);
  if constexpr (NG == 1 && NC > 4 && !pairs) {  // (kLoneValueVectors) each vector into its sum as it is converted:
    // converted all first, the row's 8 vectors and the 8 sums took 17 of 16 registers, and half's
    // pass 0.63x the time of blocks of 4 rather than 0.48-0.58x (bench_decode_tile).
    // (bfloat16's pair loads keep the path below: 0.69-0.72x.)
    // The loop is compiled twice, for strided rows (Hnd, Nhd: a pointer that steps) and gathered
    // rows (Paged: the table). One loop with rows[j] kept the table, the offset and the stride on
    // the stack (GCC 12) and tested the table every row: 16 scalar instructions beside the row's 24
    // vector ones, and MHA int8's decode steps took 1.03-1.10x as long (AMD EPYC Zen 3, bench/ab;
    // decode log, stop 93). The group loop below did not gain from the same split.
    const auto pass = [&](auto strided, const T* first) __attribute__((always_inline)) {
      for (int j = 0; j < n; ++j) {
        const T* row;  // row j + c
        if constexpr (decltype(strided)::value)
          row = first, first += rows.stride;
        else
          row = rows[j] + c;
        keep_pointer_in_register(row);
        const B x(w[at(0, j)]);
        for (int i = 0; i < NC; ++i) a[0][i] = xsimd::fma(x, load_floats<Arch>(row + i * W), a[0][i]);
        if constexpr (!ByToken) tick_asks(next, asks, NC);
      }
    };
    if (rows.table)
      pass(std::false_type{}, nullptr);
    else
      pass(std::true_type{}, rows[0] + c);  // row 0; each next row one stride on
  } else {
    for (int j = 0; j < n; ++j) {
      const T* r = rows[j] + c;
      B v[NC];
      if constexpr (pairs)
        load_row_vectors<Arch, NC>(r, v);
      else
        for (int i = 0; i < NC; ++i) v[i] = load_floats<Arch>(r + i * W);
      if constexpr (!ByToken) tick_asks(next, asks, NC);  // prefill blocks (ByToken) ask for nothing
      for (int g = 0; g < NG; ++g) {
        const B x(w[at(g, j)]);
        for (int i = 0; i < NC; ++i) a[g][i] = xsimd::fma(x, v[i], a[g][i]);
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    if constexpr (pairs) from_row_order<Arch, T, NC>(a[g]);
    for (int i = 0; i < NC; ++i) a[g][i].store_unaligned(acc + g * acc_stride + c + i * W);
  }
  keep_asks_left(next, asks);
}

/// Query vectors accumulate_weights takes in one pass over a column block: 6 x 4 accumulators
/// + 4 values + 1 weight = 29 of 32 registers (AVX2: 2 x 4 + 4 + 1 = 13 of 16; but see
/// six_value_vectors).
template <class Arch>
inline constexpr int kValueVectors = kVectorRegisters<Arch> == 32 ? 6 : 2;

/// Whether decode's value pass takes a group's heads 6 at a time over blocks of 2 column vectors
/// (12 accumulators + 2 values + 1 weight = 15 of 16 registers): on AVX2, for a group that is a
/// multiple of 6 (XCache's, SlimK2's and MQA's 6 heads: Whisper tiny's). Each row's vectors are
/// then loaded (and a 16-bit row converted) once for the 6 heads, where blocks of 2 x 4 loaded
/// them 3 times (the weights' broadcasts included, 8 loads per 12 multiply-adds rather than 6 per
/// 8). With its tile in L1 or L2 the value pass took 0.70-0.87x the time (XCache and SlimK2, f32
/// and half; bench_decode_tile, one thread); end to end, with value_loads_per_row pacing the asks
/// by the new loads (2 threads, L 65536, batch 16, best of 4 alternated runs, the same outputs),
/// XCache took 0.81-0.87x (f32, half, int8; Hnd and Paged<16>), MQA 0.87-0.95x, SlimK2 0.89-1.00x,
/// against 0.91-0.95x for the unchanged MHA and GQA<2> beside them (AMD EPYC Zen 3). At batch 1,
/// noisier, the best times were 0.66-1.08x and the medians 0.64-0.95x, against 0.91-1.02x and
/// 0.99-1.01x for the controls. Paced by the old counts (3 loads per vector)
/// the asks fell behind and the DRAM-resident pass took 1.1-1.3x as long.
template <class Arch>
constexpr bool six_value_vectors(int group) {
  return kVectorRegisters<Arch> == 16 && group % 6 == 0;
}

/// Column vectors decode's value pass takes a row at a time for a head that reads its 16-bit or
/// int8 rows alone (MHA's group of 1, and each head of a tile whose dropped tokens are not all finite:
/// accumulate_kept) on AVX2: 8, a 64-wide value (8 accumulators + a weight + the vector being
/// converted). In blocks of 4 (as a group's), the head's 4 accumulators are 4 dependent
/// multiply-add chains, one multiply-add a cycle at a 4-cycle latency where the core has two
/// pipes, and the rows are read in twice as many passes. Each column still sums its rows in the
/// same order: the same bits as in blocks of 4 (test_decode_tile). On an AMD EPYC Zen 3
/// (bench_decode_tile, one core, minima of 3 alternated runs) MHA's value pass took 0.48-0.58x
/// the time for half and 0.69-0.72x for bfloat16 with its tile in L1 or L2, and both passes
/// 0.66-0.97x and 0.61-0.90x. Whole decode steps did not move (L 65536, batch 16, bench/ab, 11
/// rounds: paired runs 0.94-1.00 on Hnd, Nhd and Paged<16>, against 0.97-1.04 for unchanged
/// cases beside them), as they are not bound by the passes' instructions there (decode log,
/// 2026-12-06). Float rows keep blocks of 4: with 8, the
/// pass over a DRAM-resident buffer took 1.07-1.19x as long and decode steps 1.03-1.06x. int8
/// rows, first measured at 0.94-0.99x and kept in blocks of 4, take 8 since their codes load in one
/// instruction (load_floats): the value pass took 0.82-0.93x (L1, L2, 1 GiB), both passes
/// 0.92-0.94x, and MHA int8's steps 0.94x on Hnd and Nhd, 1.01x on Paged<16> (pairs; L 65536,
/// batch 16, two threads; Paged<16> measured while GCC still inlined its score pass:
/// score_tile_fp32) against 0.97-1.01x for unchanged cases beside them (decode log, 2026-12-06,
/// stop 85).
/// AVX-512 keeps 4 (64 columns), and so do the other architectures (unmeasured there).
template <class Arch>
inline constexpr int kLoneValueVectors = std::is_base_of_v<xsimd::avx2, Arch> && kVectorRegisters<Arch> == 16 ? 8 : 4;

/// A prefill block's value product (accumulate_weights over [token][lanes] weights): query
/// vectors x column vectors per register block. AVX-512: 6 x 4, as decode. AVX2's 16 registers:
/// 6 x 2 + 2 values + 1 weight = 15, 8 loads a row for 12 FMAs, where decode's 2 x 4 (13) loads
/// 6 for 8 (measured with score_block's AVX2 block: block_tile.hpp); decode takes 6 x 2 too for
/// groups of a multiple of 6 (six_value_vectors).
template <class Arch>
inline constexpr int kBlockValueVectors = 6;
template <class Arch>
inline constexpr int kBlockValueColumns = kVectorRegisters<Arch> == 32 ? 4 : 2;

/// Vector loads of each row of a tile in the value pass (accumulate_weights: each whole vector of
/// the row once per block of kValueVectors heads, or of 6 heads: six_value_vectors): the pass's
/// ticks (tick_asks).
template <class Arch>
constexpr int value_loads_per_row(int group, int dim) {
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  const int blocks = (group + kValueVectors<Arch> - 1) / kValueVectors<Arch>;  // of query vectors, for each column block
  if (six_value_vectors<Arch>(group)) return dim / (2 * W) * 2 * (group / 6) + dim % (2 * W) / W * blocks;
  return dim / W * blocks;
}

/// acc[g][:] += sum_j w(g, j) row_j[:] for `m` query vectors (weight (g, j) at w[at(g, j)]),
/// row_j = rows[j], `dim` columns, acc row stride `acc_stride` (0: dim). Column blocks
/// outside, vector blocks inside: a column block of the tile's rows stays in L1 while every vector
/// block reads it.
template <class Arch, class T, bool ByToken, class Next = NextTile<>>
void accumulate_weights(const float* w, WeightIndex<ByToken> at, int m, TileRows<T> rows, int n, float* acc, int dim,
                        int acc_stride = 0, Next* next = nullptr) {
  if (acc_stride == 0) acc_stride = dim;
  constexpr int W = int(xsimd::batch<float, Arch>::size);
  constexpr int kVectors = ByToken ? kBlockValueVectors<Arch> : kValueVectors<Arch>;
  constexpr int kColumns = ByToken ? kBlockValueColumns<Arch> : 4;
  const auto columns = [&](auto nc, int c) {
    constexpr int NC = decltype(nc)::value;
    if constexpr (ByToken) {  // prefill blocks: whole register blocks, then one vector at a time (fewer instantiations)
      int g0 = 0;
      for (; g0 + kVectors <= m; g0 += kVectors)
        accumulate_columns<Arch, kVectors, NC>(w + at(g0, 0), at, rows, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride, c);
      for (; g0 < m; ++g0)
        accumulate_columns<Arch, 1, NC>(w + at(g0, 0), at, rows, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride, c);
    } else {  // decode: a group's heads in one pass over the tile's rows, however many
      for (int g0 = 0; g0 < m; g0 += kVectors)
        with_count<kVectors>(std::min(kVectors, m - g0), [&](auto ng) {
          accumulate_columns<Arch, decltype(ng)::value, NC>(w + at(g0, 0), at, rows, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride,
                                                            c, next);
        });
    }
  };
  int c = 0;
  if constexpr (!ByToken && sizeof(T) <= 2 && kLoneValueVectors<Arch> > kColumns)
    if (m == 1)  // one head alone (MHA), 16-bit and int8 rows: blocks of kLoneValueVectors column vectors first, the rest below
      for (; c + kLoneValueVectors<Arch> * W <= dim; c += kLoneValueVectors<Arch> * W)
        accumulate_columns<Arch, 1, kLoneValueVectors<Arch>>(w, at, rows, n, acc, acc_stride, c, next);
  if constexpr (!ByToken)
    if (six_value_vectors<Arch>(m))  // blocks of 2 column vectors first, the rest below
      for (; c + 2 * W <= dim; c += 2 * W)
        for (int g0 = 0; g0 < m; g0 += 6)
          accumulate_columns<Arch, 6, 2>(w + at(g0, 0), at, rows, n, acc + std::ptrdiff_t(g0) * acc_stride, acc_stride, c, next);
  for (; c + kColumns * W <= dim; c += kColumns * W) columns(std::integral_constant<int, kColumns>{}, c);
  for (; c + W <= dim; c += W) columns(std::integral_constant<int, 1>{}, c);
  for (; c < dim; ++c)  // columns past the last full vector
    for (int g = 0; g < m; ++g) {
      float a = acc[std::ptrdiff_t(g) * acc_stride + c];
      // (std::fma, not a * b + c, which GCC contracted in one of the strided and gathered paths
      // and not in the other)
      for (int j = 0; j < n; ++j) a = std::fma(w[at(g, j)], element_value(rows[j][c]), a);
      acc[std::ptrdiff_t(g) * acc_stride + c] = a;
    }
}

/// Decode's value half: acc[g][:] += sum_j p[g][j] rows[j][:] for the `group` heads, p[g][j] at
/// p[g * kTile + j].
template <class Arch, class T, class Next = NextTile<>>
void accumulate_tile(const float* p, int group, TileRows<T> rows, int n, float* acc, int dim, Next* next = nullptr) {
  accumulate_weights<Arch>(p, WeightIndex<false>{}, group, rows, n, acc, dim, 0, next);
}

/// out[g * kTile + j] = p[g * kTile + j] * scale_j(s) for g < group and j < n: each of the group's
/// scores or weights at token j times segment s's scale of row j (starting at rows[j]). The scales
/// are gathered once, then applied W tokens at a time (the same product per element); out may be p.
/// Always inlined: left a call, int8 MHA took 1.04-1.12x as long on Paged<16>, Paged<64> and Hnd,
/// SlimK2 1.04-1.09x (one run 0.96x), GQA<2> 0.99-1.07x and MQA 1.01x (AMD EPYC Zen 5, L 65536
/// batch 1 and 16, L 4096 batch 64, L 1500 batch 16; medians of 15-41 calls alternated in one
/// process, the same outputs).
template <class Arch>
[[gnu::always_inline]] inline void scale_by_segment(const float* p, int group, TileRows<std::int8_t> rows, int n, RowScales layout, int s,
                                                     float* out) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = int(B::size);
  alignas(64) float scales[kTile];  // n <= kTile
  for (int j = 0; j < n; ++j) scales[j] = segment_scale(rows[j], layout, s);
  int j = 0;
  for (; j + W <= n; j += W) {
    const B scale = B::load_aligned(scales + j);
    for (int g = 0; g < group; ++g) (B::load_unaligned(p + g * kTile + j) * scale).store_unaligned(out + g * kTile + j);
  }
  for (; j < n; ++j)
    for (int g = 0; g < group; ++g) out[g * kTile + j] = p[g * kTile + j] * scales[j];
}

/// score_tile's scores of `group` heads over an int8 tile (dot products with the codes) times
/// their keys' scales, in place: head g's key starts at element key_offset + g * group_stride of
/// each row (group_stride 0: one key for all), so the heads whose keys lie in one segment (all of
/// them where they share a key; SlimK2's slices, a segment each) are scaled together by
/// scale_by_segment. `rows`: the tile's stored rows, each from its first element.
template <class Arch>
[[gnu::always_inline]] inline void scale_scores_by_segment(float* scores, int group, TileRows<std::int8_t> rows, int n, RowScales layout,
                                                           int key_offset, int group_stride) {
  const auto segment_of = [&](int g) { return (key_offset + g * group_stride) / layout.segment; };
  for (int g = 0, last; g < group; g = last) {
    for (last = g + 1; last < group && segment_of(last) == segment_of(g);) ++last;
    scale_by_segment<Arch>(scores + g * kTile, last - g, rows, n, layout, segment_of(g), scores + g * kTile);
  }
}

/// Decode's value half over an int8 tile (rows of codes, their scales after them: `layout`):
/// acc[g][:] += sum_j p[g][j] scale_j(s) codes_j[:] per segment s of the row, the scale folded
/// into the weights (`w`: scratch of group * kTile floats), so the codes are read as they are.
/// Each segment's pass over the rows steps `next` (paced asks) as accumulate_tile's does. The
/// weights are scaled W tokens at a time (scale_by_segment). Scaled one by one, SlimK2's 6
/// segments x 6 heads x 64 tokens per tile took about a fifth of its int8 decode step (perf,
/// cpu-clock). Vectorised, SlimK2 int8 took 0.77-0.80 of the time and XCache int8 (one segment)
/// 0.97 (Intel Xeon, Hnd, L 65536, batch 16, medians of 15 calls alternated in one process, equal
/// sums).
template <class Arch, class Next = NextTile<>>
void accumulate_int8_tile(const float* p, int group, TileRows<std::int8_t> rows, int n, RowScales layout, float* w, float* acc,
                          Next* next = nullptr) {
  for (int s = 0; s < layout.segments(); ++s) {
    const int first = s * layout.segment, width = std::min(layout.segment, layout.codes - first);
    scale_by_segment<Arch>(p, group, rows, n, layout, s, w);
    accumulate_weights<Arch>(w, WeightIndex<false>{}, group, rows.plus(first), n, acc + first, width, layout.codes, next);
  }
}

}  // namespace polyattn::exec::cpu
