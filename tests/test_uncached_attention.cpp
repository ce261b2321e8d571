// Uncached attention (uncached_attention.hpp) against the dense oracle in double, on Reference
// and CpuSimd: the lengths around the block and tile sizes (64 rows of 64 keys), causal and full,
// chunks after earlier keys, grouped heads; a value that is not finite where a row does not see
// it; results independent of the thread count; shape errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/uncached_attention.hpp>

#include "support/check_throws.hpp"
#include "support/dense_oracle.hpp"

using namespace polyattn;
using namespace polyattn::testing;

namespace {

struct Case {
  int n;       // query rows
  int n_keys;  // keys (>= n for causal: the rows are the last n positions)
  int query_heads, kv_heads, head_dim;
  Mask mask;
};

template <class Executor>
void check_against_oracle(Executor& executor, const Case& c, double tolerance) {
  std::mt19937 rng(std::uint32_t(c.n * 7919 + c.n_keys * 31 + c.query_heads));
  const RowMatrixXf q = random_matrix(c.n, c.query_heads * c.head_dim, rng);
  const RowMatrixXf k = random_matrix(c.n_keys, c.kv_heads * c.head_dim, rng);
  const RowMatrixXf v = random_matrix(c.n_keys, c.kv_heads * c.head_dim, rng);
  RowMatrixXf out = RowMatrixXf::Constant(c.n, c.query_heads * c.head_dim, std::numeric_limits<float>::quiet_NaN());
  attention(executor, q, k, v, {c.query_heads, c.kv_heads, c.head_dim}, c.mask, out);
  const RowMatrixXf expected =
      dense_attention(q, k, v, c.query_heads, c.query_heads / c.kv_heads, c.mask == Mask::causal, c.n_keys - c.n);
  CHECK(max_abs_diff(out, expected) <= tolerance);
}

// Lengths: one row, two, a block (64) and one either side, several blocks with a ragged last
// tile, and Whisper's 1500 frames with 2000 after it (fewer heads there, to keep the oracle short).
const Case kCases[] = {
    {1, 1, 6, 6, 64, Mask::causal},      {2, 2, 6, 6, 64, Mask::full},        {63, 63, 4, 4, 64, Mask::causal},
    {64, 64, 4, 2, 64, Mask::full},      {65, 65, 4, 2, 64, Mask::causal},    {257, 257, 2, 2, 40, Mask::causal},
    {257, 257, 3, 1, 72, Mask::full},    {1500, 1500, 1, 1, 64, Mask::full},  {2000, 2000, 1, 1, 64, Mask::causal},
    {65, 300, 4, 4, 64, Mask::causal},   // a chunk after 235 earlier keys
    {3, 100, 6, 6, 64, Mask::causal},    // fewer rows than a block: the decode kernel
    {80, 80, 8, 1, 17, Mask::causal},    // eight heads share one key (MQA), an odd head size
};

}  // namespace

TEST_CASE("uncached attention matches the dense oracle on Reference and CpuSimd") {
  for (const Case& c : kCases) {
    CAPTURE(c.n);
    CAPTURE(c.n_keys);
    CAPTURE(c.query_heads);
    CAPTURE(c.kv_heads);
    CAPTURE(c.head_dim);
    CAPTURE(c.mask == Mask::causal);
    // Reference accumulates in double: only the final rounding to float, and the float scale.
    exec::Reference reference;
    check_against_oracle(reference, c, 4 * 0x1p-24);
    exec::CpuSimd cpu(2);
    check_against_oracle(cpu, c, fp32_attention_tolerance(c.head_dim, c.n_keys));
  }
}

TEST_CASE("CpuSimd uncached attention gives the same bits on 1 and 2 threads") {
  // Each (block, head) runs in one task, start to end: no result depends on the split.
  std::mt19937 rng(11);
  const int n = 300, heads = 4, dh = 64;
  const RowMatrixXf q = random_matrix(n, heads * dh, rng), k = random_matrix(n, heads * dh, rng), v = random_matrix(n, heads * dh, rng);
  RowMatrixXf one(n, heads * dh), two(n, heads * dh);
  exec::CpuSimd single(1), pair(2);
  attention(single, q, k, v, {heads, heads, dh}, Mask::causal, one);
  attention(pair, q, k, v, {heads, heads, dh}, Mask::causal, two);
  CHECK(one == two);
}

TEST_CASE("a value that is not finite changes only the rows that see it") {
  // Causal: rows before token 40 do not see its value. A block weighs unseen tokens by 0, and
  // 0 * inf would be NaN, so those rows must take only the tokens they see.
  std::mt19937 rng(5);
  const int n = 100, heads = 2, dh = 64, bad = 40;
  const RowMatrixXf q = random_matrix(n, heads * dh, rng), k = random_matrix(n, heads * dh, rng);
  RowMatrixXf v = random_matrix(n, heads * dh, rng);
  const RowMatrixXf expected = dense_attention(q, k, v, heads, 1, true, 0);
  v(bad, 3) = std::numeric_limits<float>::infinity();
  v(bad, dh + 5) = std::numeric_limits<float>::quiet_NaN();
  exec::CpuSimd cpu(2);
  RowMatrixXf out(n, heads * dh);
  attention(cpu, q, k, v, {heads, heads, dh}, Mask::causal, out);
  CHECK(max_abs_diff(out.topRows(bad), expected.topRows(bad)) <= fp32_attention_tolerance(dh, bad));
  for (int i = bad; i < n; ++i) {
    CAPTURE(i);
    CHECK(!std::isfinite(out(i, 3)));
    CHECK(std::isnan(out(i, dh + 5)));
  }
}

TEST_CASE("prefill blocks at the score limits, on tiles every row sees whole: +inf shares, NaN shows, all -inf gives 0") {
  // Full mask, 100 rows over 100 keys (two tiles of 64 keys, every one seen whole by every row,
  // where score_block also takes each lane's max): the limits of core/attend.hpp, as decode has
  // them (test_attend_limits.cpp). Head 0's query is 1e20 in column 0; head 1's stays small.
  const int n = 100, heads = 2, dh = 16;
  std::mt19937 rng(17);
  RowMatrixXf q = random_matrix(n, heads * dh, rng), k = random_matrix(n, heads * dh, rng);
  const RowMatrixXf v = random_matrix(n, heads * dh, rng);
  q.col(0).setConstant(1e20f);
  const auto run = [&](const RowMatrixXf& keys) {
    exec::CpuSimd cpu(2);
    RowMatrixXf out = RowMatrixXf::Constant(n, heads * dh, std::numeric_limits<float>::quiet_NaN());
    attention(cpu, q, keys, v, {heads, heads, dh}, Mask::full, out);
    return out;
  };
  const RowMatrixXf small_head = dense_attention(q.rightCols(dh), k.rightCols(dh), v.rightCols(dh), 1, 1, false, 0);

  // Tokens 3 and 70 (one in each tile) score +inf in head 0 (1e20 x 1e20 overflows float): they
  // share the weight, every other token weighs 0.
  RowMatrixXf inf_keys = k;
  inf_keys(3, 0) = inf_keys(70, 0) = 1e20f;
  const RowMatrixXf shared = run(inf_keys);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < dh; ++c) CHECK(shared(i, c) == doctest::Approx((v(3, c) + v(70, c)) / 2).epsilon(1e-6));
  CHECK(max_abs_diff(shared.rightCols(dh), small_head) <= fp32_attention_tolerance(dh, n));

  // A NaN key element in head 0, second tile: every row's head 0 is NaN; head 1 unchanged.
  RowMatrixXf nan_keys = k;
  nan_keys(90, 2) = std::numeric_limits<float>::quiet_NaN();
  const RowMatrixXf nan_out = run(nan_keys);
  CHECK(nan_out.leftCols(dh).array().isNaN().all());
  CHECK(max_abs_diff(nan_out.rightCols(dh), small_head) <= fp32_attention_tolerance(dh, n));

  // Every score of head 0 is -inf (1e20 x -1e20): nothing to weigh, the output is 0.
  RowMatrixXf minus_inf_keys = k;
  minus_inf_keys.col(0).setConstant(-1e20f);
  const RowMatrixXf none = run(minus_inf_keys);
  CHECK((none.leftCols(dh).array() == 0.0f).all());
  CHECK(max_abs_diff(none.rightCols(dh), small_head) <= fp32_attention_tolerance(dh, n));
}

TEST_CASE("fused tiles: a row whose max rises by more than kRescaleAbove, or by kFusedLimit, matches the oracle") {
  // Full mask, 200 rows over 200 keys (tiles of 64: after the first, whole tiles take their
  // weights against each row's running max, attend_block.hpp). Even rows of head 0 have 1 in
  // query column 0 (odd rows 0), so key 130 (tile 2) raises their scores by 20, more than
  // kRescaleAbove over what the first tiles saw (those lanes are rescaled, their neighbours not),
  // and key 195 (tile 3) by 200, more than kFusedLimit (the tile is scored again unfused: its
  // weights against the old max would overflow).
  // Head 1 stays random; every row of both heads must match the oracle.
  const int n = 200, heads = 2, dh = 16;
  static_assert(20 > exec::cpu::kRescaleAbove && 200 - 20 > exec::cpu::kFusedLimit);
  const float scale = 1.0f / std::sqrt(float(dh));
  std::mt19937 rng(23);
  RowMatrixXf q = random_matrix(n, heads * dh, rng), k = random_matrix(n, heads * dh, rng);
  const RowMatrixXf v = random_matrix(n, heads * dh, rng);
  for (int i = 0; i < n; ++i) q(i, 0) = i % 2 == 0 ? 1.0f : 0.0f;
  k(130, 0) = 20 / scale;
  k(195, 0) = 200 / scale;
  const RowMatrixXf expected = dense_attention(q, k, v, heads, 1, false, 0);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    exec::CpuSimd cpu(threads);
    RowMatrixXf out = RowMatrixXf::Constant(n, heads * dh, std::numeric_limits<float>::quiet_NaN());
    attention(cpu, q, k, v, {heads, heads, dh}, Mask::full, out);
    CHECK(max_abs_diff(out, expected) <= fp32_attention_tolerance(dh, n));
  }
  // Without key 195 the even rows' weight sits on key 130 (the rescaled lanes' final state).
  k(195, 0) = 0;
  const RowMatrixXf expected_130 = dense_attention(q, k, v, heads, 1, false, 0);
  exec::CpuSimd cpu(2);
  RowMatrixXf out = RowMatrixXf::Constant(n, heads * dh, std::numeric_limits<float>::quiet_NaN());
  attention(cpu, q, k, v, {heads, heads, dh}, Mask::full, out);
  CHECK(max_abs_diff(out, expected_130) <= fp32_attention_tolerance(dh, n));
}

TEST_CASE("uncached attention with values narrower than keys reads each head's own value columns") {
  // Expected: the oracle over values zero-padded to the key width, whose first value_dim columns
  // of each head are the narrow values.
  std::mt19937 rng(41);
  const int hq = 4, hkv = 2, dk = 40, dv = 24, n = 70, n_keys = 90;
  const RowMatrixXf q = random_matrix(n, hq * dk, rng), k = random_matrix(n_keys, hkv * dk, rng);
  const RowMatrixXf v = random_matrix(n_keys, hkv * dv, rng);
  RowMatrixXf v_padded = RowMatrixXf::Zero(n_keys, hkv * dk);
  for (int h = 0; h < hkv; ++h) v_padded.middleCols(h * dk, dv) = v.middleCols(h * dv, dv);
  exec::Reference reference;
  exec::CpuSimd cpu(2);
  for (Mask mask : {Mask::full, Mask::causal}) {
    const RowMatrixXf padded = dense_attention(q, k, v_padded, hq, hq / hkv, mask == Mask::causal, n_keys - n);
    RowMatrixXf expected(n, hq * dv);
    for (int h = 0; h < hq; ++h) expected.middleCols(h * dv, dv) = padded.middleCols(h * dk, dv);
    RowMatrixXf out_ref = RowMatrixXf::Constant(n, hq * dv, NAN), out_cpu = out_ref;
    attention(reference, q, k, v, {hq, hkv, dk, 0.0f, dv}, mask, out_ref);
    attention(cpu, q, k, v, {hq, hkv, dk, 0.0f, dv}, mask, out_cpu);
    CHECK(max_abs_diff(out_ref, expected) <= 4 * 0x1p-24);
    CHECK(max_abs_diff(out_cpu, expected) <= fp32_attention_tolerance(dk, n_keys));
  }
  RowMatrixXf wide(n, hq * dk);
  check_throws_with<ShapeError>([&] { attention(cpu, q, k, v, {hq, hkv, dk, 0.0f, dv}, Mask::full, wide); }, "expected 70x96");
}

TEST_CASE("uncached attention refuses shapes that do not fit, naming them") {
  const RowMatrixXf q = RowMatrixXf::Zero(4, 128), kv = RowMatrixXf::Zero(5, 64);
  RowMatrixXf out(4, 128);
  exec::CpuSimd cpu(1);
  check_throws_with<ShapeError>([&] { attention(cpu, q, kv, kv, {2, 2, 64}, Mask::full, out); }, "k and v have 64 and 64 columns");
  check_throws_with<ShapeError>([&] { attention(cpu, q, kv, kv, {2, 0, 64}, Mask::full, out); }, "kv heads dividing query heads");
  check_throws_with<ShapeError>([&] { attention(cpu, q, kv, RowMatrixXf::Zero(6, 64), {2, 1, 64}, Mask::full, out); },
                           "k has 5 rows but v has 6");
  RowMatrixXf small(3, 128);
  check_throws_with<ShapeError>([&] { attention(cpu, q, kv, kv, {2, 1, 64}, Mask::full, small); }, "out is 3x128");
}
