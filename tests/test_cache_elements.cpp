// 16-bit caches (core/cache_element.hpp): Attention<..., Eigen::half or Eigen::bfloat16> rounds
// each row once when it is written and reads it back as float; everything else is unchanged.
// Checked on the Reference executor (which reads every element type): fed the same rows, a half
// cache gives exactly what a float cache gives for those rows rounded to half beforehand, at
// half the bytes, and stays within the rounding bound of the float result. (exec::Cuda's 16-bit
// caches run against this executor in tests/cuda/test_cuda_equivalence.cu.)
// int8 caches (core/row_scales.hpp) the same way: codes and a float scale per segment (per KV
// head's row for Mha, per head's slice of SlimK2's row, per row for XCache), exactly a float
// cache of the decoded rows, and within the quantisation bound derived below of the float cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/core/row_codec.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/dense_oracle.hpp"
#include "support/rounded_cache.hpp"

using namespace polyattn;
using namespace polyattn::testing;

static_assert(CacheElement<float> && CacheElement<double> && CacheElement<Eigen::half> && CacheElement<Eigen::bfloat16>);
static_assert(!CacheElement<int> && !CacheElement<std::uint16_t> && !CacheElement<std::uint8_t>);
static_assert(CacheElement<std::int8_t>);
// int8: the codes, and 4 bytes per scale: per (token, KV head) in K and V, per head slice of
// SlimK2's packed row, per token for XCache.
static_assert(Attention<Mha, Hnd, exec::Reference, std::int8_t>::cache_bytes_per_token({6, 64}) == 2 * 6 * (64 + 4));
static_assert(Attention<Gqa<2>, Nhd, exec::Reference, std::int8_t>::cache_bytes_per_token({6, 64}) == 2 * 3 * (64 + 4));
static_assert(Attention<SlimK2, Paged<16>, exec::Reference, std::int8_t>::cache_bytes_per_token({6, 64}) == 6 * (64 + 4));
static_assert(Attention<XCache, Nhd, exec::Reference, std::int8_t>::cache_bytes_per_token({6, 64}) == 384 + 4);
static_assert(Attention<Mha, Nhd, exec::Reference, Eigen::half>::cache_bytes_per_token({6, 64}) == 2 * 6 * 64 * 2);
static_assert(Attention<Mha, Paged<16>, exec::Reference, Eigen::bfloat16>::cache_bytes_per_token({6, 64}) ==
              Attention<Mha, Paged<16>, exec::Reference, float>::cache_bytes_per_token({6, 64}) / 2);

namespace {

template <class T, class Layout>
void check_16_bit_cache() {
  const RoundedCacheInputs in(5);
  const RowMatrixXf& q = in.q;
  const RowMatrixXf& k = in.k;
  const RowMatrixXf& v = in.v;
  const AttentionShape shape = in.shape;
  const RowMatrixXf y_low = check_rounded_once<T, Layout, exec::Reference>(in);
  Attention<Mha, Layout, exec::Reference, float> full(shape, in.config);
  const RowMatrixXf y_full = prefill_then_decode(full, q, k, v);
  // Against the float cache: a key element off by u|k_i| moves a score by at most
  // delta = u scale sum_i |q_i||k_i|, the softmax weights by a factor exp(+-2 delta); a value
  // element by u|v|. Per output: max|v| (exp(2 delta) - 1 + u) (+ float rounding, 2^-20 here).
  const double u = unit_roundoff<T>(), scale = 1.0 / std::sqrt(double(shape.head_dim));
  double qk = 0;
  for (int h = 0; h < shape.n_heads; ++h)
    qk = std::max(qk, double((q.middleCols(h * 8, 8).cwiseAbs() * k.middleCols(h * 8, 8).cwiseAbs().transpose()).maxCoeff()));
  const double bound = double(v.cwiseAbs().maxCoeff()) * (std::expm1(2.0 * u * scale * qk) + u) + 0x1p-20;
  const double err = max_abs_diff(y_low, y_full);
  MESSAGE(decltype(full)::name(), " ", sizeof(T) * 8, "-bit cache: max |y - y_float| = ", err, " (bound ", bound, ")");
  CHECK(err <= bound);
  CHECK(err > 0.0);  // the rows really were rounded
}

}  // namespace

TEST_CASE_TEMPLATE("a 16-bit cache rounds rows once on write and reads them back as float", T, Eigen::half, Eigen::bfloat16) {
  check_16_bit_cache<T, Nhd>();
  check_16_bit_cache<T, Hnd>();
  check_16_bit_cache<T, Paged<4>>();
}

// T = double (Reference only: CpuSimd refuses it at compile time): float inputs are exact in
// double, and Reference accumulates in double whatever T is, so a double cache gives bit for bit
// what a float cache gives, in twice the bytes. Against the dense double oracle: Reference scales
// scores by the spec's float(1/sqrt(8)), the oracle by 1/sqrt(8), so scores differ by at most
// |s| 2^-24 <= sqrt(8) 2^-24 (|q.k| <= 8 for entries in [-1, 1]), which moves an output (a convex
// combination of values in [-1, 1]) by at most twice that; plus one rounding to float each side.
TEST_CASE_TEMPLATE("a double cache runs on the Reference executor and equals the float cache", Layout, Nhd, Hnd, Paged<4>) {
  const RoundedCacheInputs in(7);
  Attention<Gqa<2>, Layout, exec::Reference, double> wide(in.shape, in.config);
  Attention<Gqa<2>, Layout, exec::Reference, float> narrow(in.shape, in.config);
  const RowMatrixXf k = in.k.leftCols(16), v = in.v.leftCols(16);  // 2 KV heads of 8
  const RowMatrixXf y = prefill_then_decode(wide, in.q, k, v);
  CHECK(y == prefill_then_decode(narrow, in.q, k, v));
  CHECK(wide.cache_bytes_allocated() == 2 * narrow.cache_bytes_allocated());
  RowMatrixXf expected(in.q.rows(), in.q.cols());
  expected.topRows(9) = dense_attention(in.q.topRows(9), k.topRows(9), v.topRows(9), 4, 2, true, 0);
  for (Eigen::Index t = 9; t < in.q.rows(); ++t)
    expected.row(t) = dense_attention(in.q.row(t), k.topRows(t + 1), v.topRows(t + 1), 4, 2, false, 0);
  CHECK(max_abs_diff(y, expected) <= (2 * std::sqrt(8.0) + 2) * 0x1p-24);
}

// The row codec (core/row_codec.hpp), which every variant writes through and every executor's
// scalar reads decode through. With u the unit roundoff, 1 + u lies halfway between 1 and 1 + 2u
// and rounds to the even 1; 1 + 3u lies halfway between 1 + 2u and 1 + 4u and rounds to the even
// 1 + 4u; 1 + 1.5u rounds up to 1 + 2u. Every encoded value decodes to itself exactly.
TEST_CASE_TEMPLATE("the row codec rounds to nearest even once and decodes exactly", T, Eigen::half, Eigen::bfloat16) {
  const double u = unit_roundoff<T>();
  const float src[] = {1.0f, float(1 + u), float(1 + 3 * u), float(1 + 1.5 * u), -0.0f, std::numeric_limits<float>::infinity()};
  const float expected[] = {1.0f, 1.0f, float(1 + 4 * u), float(1 + 2 * u), -0.0f, std::numeric_limits<float>::infinity()};
  constexpr int n = int(std::size(src));
  T row[n];
  encode_row(row, src, n);
  float decoded[n];
  decode_row(decoded, row, n);
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(decode_element(row[i]) == expected[i]);
    CHECK(decoded[i] == expected[i]);
    CHECK(std::signbit(decode_element(row[i])) == std::signbit(expected[i]));
    CHECK(Eigen::numext::bit_cast<std::uint16_t>(T(decode_element(row[i]))) == Eigen::numext::bit_cast<std::uint16_t>(row[i]));
  }
  T nan_row[1];
  const float nan[] = {std::numeric_limits<float>::quiet_NaN()};
  encode_row(nan_row, nan, 1);
  CHECK(std::isnan(decode_element(nan_row[0])));
  // MTLA encodes its merged row from a double sum: the codec narrows it through float (as Eigen
  // does), so a double just above the halfway point 1 + u first becomes the tie 1 + u in float,
  // then rounds to the even 1, not up to 1 + 2u. Within u of the value either way.
  const double above_tie[] = {1 + u + 0x1p-40};
  encode_row(row, above_tie, 1);
  CHECK(decode_element(row[0]) == 1.0f);
}

TEST_CASE("the row codec copies float rows bit for bit, and a double cache decodes to double") {
  const float src[] = {1.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 0x1p-149f};
  float row[4];
  encode_row(row, src, 4);
  CHECK(std::memcmp(row, src, sizeof(src)) == 0);
  const double precise[] = {1 + 0x1p-40};
  double wide[1];
  encode_row(wide, precise, 1);
  static_assert(std::is_same_v<decltype(decode_element(wide[0])), double>);
  CHECK(decode_element(wide[0]) == precise[0]);
  float narrow[1];
  encode_row(narrow, precise, 1);
  CHECK(decode_element(narrow[0]) == 1.0f);
}

// The int8 codec (core/row_codec.hpp): one scale per segment, max |x| / 127 rounded to float; codes
// x / scale rounded to nearest, so every element decodes within half a step, scale / 2, plus the
// float rounding of code * scale (|x'| 2^-24). The largest |x| of a segment is +-127 exactly.
TEST_CASE("the int8 codec keeps one scale per segment and decodes every element within half a step") {
  const float src[] = {0.5f, -1.0f, 0.25f, 0.003f, 0.7f, 1000.0f, -3.0f, 2.5f, 999.0f, -0.001f, 0.0f, 0.0f, 0.0f};
  constexpr int n = int(std::size(src));
  const RowScales layout = int8_row(n, 5);  // segments [0, 5), [5, 10), [10, 13)
  REQUIRE(layout.segments() == 3);
  REQUIRE(layout.stored_elements() == n + 12);
  std::int8_t row[n + 12];
  encode_row(row, src, n, 5);
  CHECK(segment_scale(row, layout, 0) == float(1.0 / 127));
  CHECK(segment_scale(row, layout, 1) == float(1000.0 / 127));
  CHECK(segment_scale(row, layout, 2) == 0.0f);  // a segment of zeros
  CHECK(row[1] == -127);
  CHECK(row[5] == 127);
  CHECK(row[0] == 64);  // 0.5 * 127 = 63.5: to the even 64
  float decoded[n];
  decode_row(decoded, row, n, 5);
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    const float scale = segment_scale(row, layout, i / 5);
    CHECK(decoded[i] == decode_at(row, i, layout));
    CHECK(std::abs(double(decoded[i]) - double(src[i])) <= scale / 2.0 + std::abs(double(decoded[i])) * 0x1p-24);
  }
  for (int i = 10; i < n; ++i) CHECK(decoded[i] == 0.0f);

  // A segment holding inf or NaN decodes to NaN, as a float cache would show it; the others are untouched.
  const float bad[] = {1.0f, std::numeric_limits<float>::infinity(), 2.0f, std::numeric_limits<float>::quiet_NaN()};
  std::int8_t bad_row[4 + 8];
  encode_row(bad_row, bad, 4, 2);
  decode_row(decoded, bad_row, 4, 2);
  CHECK(std::isnan(decoded[0]));
  CHECK(std::isnan(decoded[1]));
  CHECK(std::isnan(decoded[2]));
  CHECK(std::isnan(decoded[3]));
  encode_row(bad_row, bad, 2, 1);  // segments of one: only the inf's
  decode_row(decoded, bad_row, 2, 1);
  CHECK(decoded[0] == 1.0f);
  CHECK(std::isnan(decoded[1]));
}

namespace {

/// m's rows as an int8 cache holds them: each block of `width` columns encoded in segments of
/// `segment` and decoded.
RowMatrixXf int8_rounded(const RowMatrixXf& m, int width, int segment = 0) {
  RowMatrixXf out(m.rows(), m.cols());
  std::vector<std::int8_t> row(std::size_t(int8_row(width, segment).stored_elements()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); c += width) {
      encode_row(row.data(), m.row(r).data() + c, width, segment);
      decode_row(out.row(r).data() + c, row.data(), width, segment);
    }
  return out;
}

double largest_abs(const RowMatrixXf& m) { return double(m.cwiseAbs().maxCoeff()); }

}  // namespace

TEST_CASE_TEMPLATE("an int8 cache equals a float cache of its decoded rows and stays within the quantisation bound", Layout,
                   Nhd, Hnd, Paged<4>) {
  const RoundedCacheInputs in(5);  // 11 tokens, 4 heads of 8, entries in [-1, 1]
  const AttentionShape shape = in.shape;
  Attention<Mha, Layout, exec::Reference, std::int8_t> low(shape, in.config);
  Attention<Mha, Layout, exec::Reference, float> of_decoded(shape, in.config), full(shape, in.config);
  const RowMatrixXf y = prefill_then_decode(low, in.q, in.k, in.v);
  CHECK(y == prefill_then_decode(of_decoded, in.q, int8_rounded(in.k, 8), int8_rounded(in.v, 8)));
  CHECK(low.cache_bytes_allocated() * 32 == of_decoded.cache_bytes_allocated() * (8 + 4));  // 8 codes + a scale, per 8 floats
  // Against the float cache. Each key element moves by at most its head's max|k| / 254 (half a
  // step) and the decode's rounding, so a score by delta = scale |q_h|_1 max|k| (1/254 + 2^-23)
  // and the softmax weights by a factor exp(+-2 delta): sum_j |p'_j - p_j| <= expm1(2 delta). A
  // value element moves by max|v| (1/254 + 2^-23). Per output: max|v| (expm1(2 delta) + 1/254 +
  // 2^-23) (+ float rounding, 2^-20 here).
  const RowMatrixXf y_full = prefill_then_decode(full, in.q, in.k, in.v);
  const double scale = 1.0 / std::sqrt(double(shape.head_dim)), step = 1.0 / 254 + 0x1p-23;
  double q1 = 0;
  for (int h = 0; h < shape.n_heads; ++h) q1 = std::max(q1, double(in.q.middleCols(h * 8, 8).cwiseAbs().rowwise().sum().maxCoeff()));
  const double delta = scale * q1 * largest_abs(in.k) * step;
  const double vmax = largest_abs(in.v);
  const double bound = vmax * (std::expm1(2 * delta) + step) + 0x1p-20;
  const double err = max_abs_diff(y, y_full);
  MESSAGE(decltype(low)::name(), " int8 cache: max |y - y_float| = ", err, " (bound ", bound, ")");
  CHECK(err <= bound);
  CHECK(err > 0.0);
}

// Where the scales go for the variants whose rows hold several heads: SlimK2 keeps one per
// head's slice of its packed key row, XCache one per row. Each equals the float cache of its rows
// decoded with that segmentation, on every layout (a wrong segmentation changes the values).
TEST_CASE_TEMPLATE("int8 SlimK2 and XCache caches keep a scale per head slice and per row", Layout, Nhd, Hnd, Paged<4>) {
  const AttentionShape shape{4, 8};  // e = d = 32
  std::mt19937 rng(9);
  const CacheConfig config{.max_sequences = 2, .capacity = 16, .poison_unused = true};
  RowMatrixXf q = random_matrix(11, 32, rng), k = random_matrix(11, 32, rng);
  for (Eigen::Index c = 8; c < 16; ++c) k.col(c) *= 50.0f;  // head 1's slice 50x larger: its own scale
  const auto run = [&](auto& attn, const RowMatrixXf& rows) {
    const int seq = attn.open_sequence();
    RowMatrixXf y(q.rows(), 32);
    attn.prefill(seq, q, {rows}, Mask::causal, y);
    return y;
  };
  SlimK2::Params slim{.w_kv = random_matrix(32, 32, rng)};
  Attention<SlimK2, Layout, exec::Reference, std::int8_t> slim_low(shape, config, slim);
  Attention<SlimK2, Layout, exec::Reference, float> slim_float(shape, config, slim);
  const RowMatrixXf y_slim = run(slim_low, k);
  CHECK(y_slim == run(slim_float, int8_rounded(k, 32, 8)));
  CHECK(y_slim != run(slim_float, int8_rounded(k, 32)));  // one scale for the row would lose head 0's precision
  XCache::Params x{.w_q = random_matrix(32, 32, rng), .b_q = random_matrix(1, 32, rng), .w_k = random_matrix(32, 32, rng),
                   .w_qk = {}, .c_qk = {}, .w_v = random_matrix(32, 32, rng), .b_v = random_matrix(1, 32, rng)};
  Attention<XCache, Layout, exec::Reference, std::int8_t> x_low(shape, config, x);
  Attention<XCache, Layout, exec::Reference, float> x_float(shape, config, x);
  CHECK(run(x_low, k) == run(x_float, int8_rounded(k, 32)));
}
