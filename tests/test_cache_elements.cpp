// 16-bit caches (core/cache_element.hpp): Attention<..., Eigen::half or Eigen::bfloat16> rounds
// each row once when it is written and reads it back as float; everything else is unchanged.
// Checked on the Reference executor (which reads every element type): fed the same rows, a half
// cache gives exactly what a float cache gives for those rows rounded to half beforehand, at
// half the bytes, and stays within the rounding bound of the float result. (exec::Cuda's 16-bit
// caches run against this executor in tests/cuda/test_cuda_equivalence.cu.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/core/row_codec.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "support/dense_oracle.hpp"
#include "support/rounded_cache.hpp"

using namespace polyattn;
using namespace polyattn::testing;

static_assert(CacheElement<float> && CacheElement<double> && CacheElement<Eigen::half> && CacheElement<Eigen::bfloat16>);
static_assert(!CacheElement<int> && !CacheElement<std::uint16_t>);
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
