// Key masks (core/key_mask.hpp), the hook every executor calls inside its tile loop, against the
// dense oracle (support/dense_oracle.hpp, which applies the same rules independently):
//   - SlidingWindow<W> through uncached attention: the lengths around the tile and block sizes
//     (1, 2, 63, 64, 65, 257, 1500, 2000), causal and full, windows shorter and longer than a tile;
//   - a mask that drops keys inside the range (MTLA's stride mask) through uncached attention,
//     on the decode kernel (fewer than 4 rows) and the prefill blocks;
//   - a token a row does not see may hold a value that is not finite;
//   - Attention<V, L, E, float, SlidingWindow<W>>: chunked causal prefill and ragged batched
//     decode, for Mha, Gqa<2>, Mqa and SlimK2 (with W_kv = I it is MHA with V = K) on every layout
//     and CPU executor with NaN-poisoned capacity, and for XCache and Mla, whose decode with a
//     window equals a replay of the window's rows alone, bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
#include "support/fork_scenarios.hpp"
#include "support/window_scenarios.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

template <int S>
bool stride_keeps(int visible, int key) {  // the oracle's copy of MTLA's stride rule
  return key == visible - 1 || (key + 1) % S == 0;
}

struct WindowCase {
  int n, n_keys, query_heads, kv_heads, head_dim;
  Mask mask;
};

/// Uncached attention under key mask M on `executor` against the oracle applying `which`.
template <class M, class Executor>
void check_uncached(Executor& executor, const WindowCase& c, const OracleKeys& which, double tolerance) {
  std::mt19937 rng(std::uint32_t(c.n * 131 + c.n_keys * 7 + c.query_heads));
  const RowMatrixXf q = random_matrix(c.n, c.query_heads * c.head_dim, rng);
  const RowMatrixXf k = random_matrix(c.n_keys, c.kv_heads * c.head_dim, rng);
  const RowMatrixXf v = random_matrix(c.n_keys, c.kv_heads * c.head_dim, rng);
  RowMatrixXf out = RowMatrixXf::Constant(c.n, c.query_heads * c.head_dim, std::numeric_limits<float>::quiet_NaN());
  attention<M>(executor, q, k, v, {c.query_heads, c.kv_heads, c.head_dim}, c.mask, out);
  const RowMatrixXf expected =
      dense_attention(q, k, v, c.query_heads, c.query_heads / c.kv_heads, c.mask == Mask::causal, c.n_keys - c.n, which);
  CHECK(max_abs_diff(out, expected) <= tolerance);
}

template <int W>
void check_window_both_executors(const WindowCase& c) {
  CAPTURE(W);
  CAPTURE(c.n);
  CAPTURE(c.n_keys);
  CAPTURE(c.mask == Mask::causal);
  exec::Reference reference;
  check_uncached<SlidingWindow<W>>(reference, c, {.window = W, .keeps = {}}, 4 * 0x1p-24);
  exec::CpuSimd cpu(2);
  check_uncached<SlidingWindow<W>>(cpu, c, {.window = W, .keeps = {}}, fp32_attention_tolerance(c.head_dim, std::min(W, c.n_keys)));
}

}  // namespace

TEST_CASE("a sliding window through uncached attention matches the dense oracle on Reference and CpuSimd") {
  const WindowCase lengths[] = {
      {1, 1, 4, 4, 64, Mask::causal},    {2, 2, 4, 2, 64, Mask::causal},      {63, 63, 4, 4, 64, Mask::causal},
      {64, 64, 4, 1, 64, Mask::full},    {65, 65, 4, 2, 40, Mask::causal},    {257, 257, 2, 2, 72, Mask::causal},
      {257, 257, 2, 1, 64, Mask::full},  {1500, 1500, 1, 1, 64, Mask::causal}, {2000, 2000, 1, 1, 64, Mask::causal},
      {65, 300, 4, 4, 64, Mask::causal},  // a chunk after 235 earlier keys
      {3, 200, 6, 3, 64, Mask::causal},   // fewer rows than a block: the decode kernel
  };
  for (const WindowCase& c : lengths) {
    check_window_both_executors<1>(c);   // each row sees itself only
    check_window_both_executors<16>(c);  // inside one tile
    check_window_both_executors<100>(c); // across tiles and blocks
  }
  check_window_both_executors<1000>({1500, 1500, 1, 1, 64, Mask::causal});
}

TEST_CASE("a mask that drops keys (MTLA's stride mask) matches the dense oracle on Reference and CpuSimd") {
  const WindowCase lengths[] = {
      {1, 1, 2, 2, 64, Mask::causal},  {2, 2, 2, 1, 64, Mask::causal},    {3, 3, 4, 4, 17, Mask::causal},
      {63, 63, 4, 4, 64, Mask::causal}, {64, 64, 4, 2, 64, Mask::causal}, {65, 65, 2, 2, 64, Mask::causal},
      {257, 257, 2, 1, 40, Mask::causal}, {3, 150, 4, 4, 64, Mask::causal},  // the decode kernel
  };
  for (const WindowCase& c : lengths) {
    CAPTURE(c.n);
    CAPTURE(c.n_keys);
    exec::Reference reference;
    exec::CpuSimd cpu(2);
    check_uncached<MtlaStrideMask<3>>(reference, c, {.keeps = stride_keeps<3>}, 4 * 0x1p-24);
    check_uncached<MtlaStrideMask<3>>(cpu, c, {.keeps = stride_keeps<3>}, fp32_attention_tolerance(c.head_dim, c.n_keys));
    check_uncached<MtlaStrideMask<4>>(cpu, c, {.keeps = stride_keeps<4>}, fp32_attention_tolerance(c.head_dim, c.n_keys));
  }
}

TEST_CASE("a value that is not finite changes only the rows whose mask lets them see it") {
  // The rows that do not see the bad token weigh it 0, and 0 * inf is NaN: they must not read it.
  std::mt19937 rng(8);
  const int heads = 2, dh = 64, n_keys = 100;
  const RowMatrixXf k = random_matrix(n_keys, heads * dh, rng);
  const RowMatrixXf v_good = random_matrix(n_keys, heads * dh, rng);
  for (const int n : {3, 100}) {  // the decode kernel, the prefill blocks
    CAPTURE(n);
    const RowMatrixXf q = random_matrix(n, heads * dh, rng);
    const int first_pos = n_keys - n;
    const auto check = [&](auto mask, const OracleKeys& which, int bad, auto sees_bad) {
      RowMatrixXf v = v_good;
      v(bad, 3) = std::numeric_limits<float>::infinity();
      v(bad, dh + 5) = std::numeric_limits<float>::quiet_NaN();
      const RowMatrixXf expected = dense_attention(q, k, v_good, heads, 1, true, first_pos, which);
      exec::Reference reference;
      exec::CpuSimd cpu(2);
      RowMatrixXf out_ref(n, heads * dh), out_cpu(n, heads * dh);
      attention<decltype(mask)>(reference, q, k, v, {heads, heads, dh}, Mask::causal, out_ref);
      attention<decltype(mask)>(cpu, q, k, v, {heads, heads, dh}, Mask::causal, out_cpu);
      for (int i = 0; i < n; ++i) {
        CAPTURE(i);
        if (sees_bad(first_pos + i)) {
          CHECK(std::isnan(out_cpu(i, dh + 5)));
          CHECK(std::isnan(out_ref(i, dh + 5)));
        } else {
          CHECK(max_abs_diff(RowMatrixXf(out_cpu.row(i)), RowMatrixXf(expected.row(i))) <= fp32_attention_tolerance(dh, n_keys));
          CHECK(max_abs_diff(RowMatrixXf(out_ref.row(i)), RowMatrixXf(expected.row(i))) <= 4 * 0x1p-24);
        }
      }
    };
    // A window of 10: token 92 is seen by the rows at 92..101, token 60 by those at 60..69 (none
    // of the 3-row case's 97..99).
    check(SlidingWindow<10>{}, {.window = 10, .keeps = {}}, 92, [](int pos) { return pos >= 92 && pos < 102; });
    check(SlidingWindow<10>{}, {.window = 10, .keeps = {}}, 60, [](int pos) { return pos >= 60 && pos < 70; });
    // The stride mask: token 97 does not close a slot of 3, so only row 97 sees it.
    check(MtlaStrideMask<3>{}, {.keeps = stride_keeps<3>}, 97, [](int pos) { return pos == 97; });
  }
}

TEST_CASE_TEMPLATE("Attention with a sliding window: chunked prefill and ragged batched decode match the dense oracle", C,
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_WINDOW_COMBOS, Mha), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_WINDOW_COMBOS, Gqa<2>),
                   POLYATTN_ON_CPU_EXECUTORS(POLYATTN_WINDOW_COMBOS, Mqa), POLYATTN_ON_CPU_EXECUTORS(POLYATTN_WINDOW_COMBOS, SlimK2)) {
  window_prefill_and_decode<typename C::type>();
}

namespace {

// The windowed type of each combination (a window of 20), on the contiguous layouts; the test
// replays into the same type without a window.
#define POLYATTN_REPLAY_COMBOS(V)                                                                                    \
  Combo<V, Nhd, exec::Reference, float, SlidingWindow<20>>, Combo<V, Hnd, exec::Reference, float, SlidingWindow<20>>, \
      Combo<V, Nhd, exec::CpuSimd, float, SlidingWindow<20>>, Combo<V, Hnd, exec::CpuSimd, float, SlidingWindow<20>>
using ReplayMlaPreserved = Mla<12, 4, MlaKeyPart::preserved>;
using ReplayMlaRope = Mla<12, 4, MlaKeyPart::decoupled_rope>;

}  // namespace

TEST_CASE_TEMPLATE("a windowed decode of XCache and Mla equals a replay of the window's rows alone, bit for bit", C,
                   POLYATTN_REPLAY_COMBOS(XCache), POLYATTN_REPLAY_COMBOS(ReplayMlaPreserved),
                   POLYATTN_REPLAY_COMBOS(ReplayMlaRope)) {
  // The window's rows are all the replay holds; the decode kernel's tiles start at the window's
  // first row as the replay's start at its row 0, so the arithmetic is the same.
  using A = typename C::type;
  using V = typename A::variant_type;
  constexpr int W = A::mask_type::window;
  const AttentionShape s{4, 8};
  std::mt19937 rng(31);
  const auto params = params_for<V>(s, rng);
  const int qw = V::query_width(s), ow = V::output_width(s);
  A windowed(s, {.max_sequences = 1, .capacity = 80, .poison_unused = true}, params, 2);
  Attention<V, typename C::layout, typename C::executor> replay(s, {.max_sequences = 1, .capacity = W, .poison_unused = true}, params, 2);
  const int seq = windowed.open_sequence();
  const RandomRows<V> prefix(s, 50, rng);
  RowMatrixXf out(50, ow);
  windowed.prefill(seq, random_matrix(50, qw, rng), prefix.view(), Mask::causal, out);
  std::vector<RandomRows<V>> history;
  for (int step = 0; step < 5; ++step) history.emplace_back(s, 1, rng);
  for (int step = 0; step < 5; ++step) {
    const RowMatrixXf q = random_matrix(1, qw, rng);
    const RowMatrixXf got = decode(windowed, {seq}, q, history[std::size_t(step)].view());
    // The replay: the last W rows (of the prefix, then of the steps so far), appended afresh.
    const int r = replay.open_sequence();
    const int from_prefix = std::max(0, W - (step + 1));
    if (from_prefix > 0) {
      RandomRows<V> tail = prefix;
      tail.first = prefix.first.bottomRows(from_prefix).eval();
      if (tail.second.size() > 0) tail.second = prefix.second.bottomRows(from_prefix).eval();
      replay.append(r, tail.view());
    }
    for (int i = std::max(0, step + 1 - W); i < step; ++i) replay.append(r, history[std::size_t(i)].view());
    RowMatrixXf expected(1, ow);
    replay.decode(std::vector<int>{r}, q, history[std::size_t(step)].view(), expected);
    replay.close_sequence(r);
    CAPTURE(step);
    CHECK(got == expected);
  }
}
