// OnednnInt8Dense (examples/whisper/onednn_int8_dense.hpp): its stored linear layers against a
// double oracle under the error bound that int8 quantization allows, and its quantized copies,
// made once per weight and kept by address.
#include <doctest/doctest.h>

#include <whisper/onednn_int8_dense.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dense_engine_checks.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;
using whisper_test::random_matrix;
using whisper_test::Rng;
using whisper_test::RowMatrixXd;

namespace {

// The bound on |x W[r]^T + b_r - y_int8[i, r]| (y by OnednnInt8Dense::stored_affine), derived:
//
// Quantization, with codes up to L (127, or 63 where oneDNN has no VNNI kernel). A row v with
// scale s = fl(max|v| / L) is stored as q_j = round(fl(v_j fl(1/s))), and fl(v_j fl(1/s)) =
// (v_j / s)(1 + d), |d| <= 2u + u^2, with |v_j / s| <= L (1 + u): so |v_j - s q_j| <= s (1/2 +
// (2L + 1) u) =: h (no clamping occurs; a zero row has s = 0, q = 0, h = 0).
// With e_x = x - sx qx and e_w = w - sw qw (|e_x| <= hx, |e_w| <= hw), the int32 sum is exact and
//   x.w - sx sw (qx.qw) = sum_j (x_j e_w,j + w_j e_x,j - e_x,j e_w,j)
//   |...| <= sum_j (|x_j| hw + |w_j| hx + hx hw) =: Q,
// which is the brief's sum_j (|x_j| sw/2 + |w_j| sx/2 + sx sw/4) with each half-scale widened by
// the 255 u of the division's rounding.
//
// Float rounding. y = fl(fl(fl(float(acc)) sx) sw) + b: three roundings of a value whose size is
// |sx sw acc| <= |x|.|w| + Q (relative (1 + u)^3 - 1 < 3.01 u), then the bias addition
// (u (|v| + |b|)). In all <= 4.02 u (|x|.|w| + Q + |b|); 5 u leaves the oracle's double sums
// (2^-53 per term) room without being a tolerance chosen to pass.
RowMatrixXd int8_affine_bound(const RowMatrixXf& x, const RowMatrixXf& w, const RowVectorXf* bias, int levels) {
  const double u = std::ldexp(1.0, -24);
  const float L = float(levels);
  const double half_step = 0.5 + (2.0 * levels + 1.0) * u;
  RowMatrixXd bound(x.rows(), w.rows());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const double hx = double(x.row(i).cwiseAbs().maxCoeff() / L) * half_step;
    for (Eigen::Index r = 0; r < w.rows(); ++r) {
      const double hw = double(w.row(r).cwiseAbs().maxCoeff() / L) * half_step;
      double q = 0, magnitude = 0;
      for (Eigen::Index j = 0; j < x.cols(); ++j) {
        const double xj = std::abs(double(x(i, j))), wj = std::abs(double(w(r, j)));
        q += xj * hw + wj * hx + hx * hw;
        magnitude += xj * wj;
      }
      const double b = bias ? std::abs(double((*bias)[r])) : 0.0;
      bound(i, r) = q + 5.0 * u * (magnitude + q + b);
    }
  }
  return bound;
}

// y (written into a row block of a NaN-filled matrix) against the double oracle x W^T + b.
void check_int8_linear(OnednnInt8Dense& engine, const RowMatrixXf& x, const StoredLinear& l) {
  const RowMatrixXf& w = l.weight.as_float();  // a float16 weight's values, exact in float
  RowMatrixXf out = RowMatrixXf::Constant(x.rows(), w.rows() + 5, std::numeric_limits<float>::quiet_NaN());
  engine.linear_into(x, l, out.middleCols(2, w.rows()));
  CHECK(out.leftCols(2).array().isNaN().all());
  CHECK(out.rightCols(3).array().isNaN().all());
  RowMatrixXd want = x.cast<double>() * w.cast<double>().transpose();
  want.rowwise() += l.bias.cast<double>();
  const RowMatrixXd error = (out.middleCols(2, w.rows()).cast<double>() - want).cwiseAbs();
  const RowMatrixXd bound = int8_affine_bound(x, w, &l.bias, engine.levels());
  CHECK((error.array() <= bound.array()).all());
  // Int8 is not float32 in disguise: the errors are there, and the bound is not far above them.
  CHECK(error.maxCoeff() > 0.0);
  MESSAGE("codes up to " << engine.levels() << ", rows " << x.rows() << ": largest error / bound "
                         << (error.array() / bound.array().max(1e-30)).maxCoeff());
}

}  // namespace

TEST_SUITE("int8") {
  TEST_CASE("int8 stored linears: within the quantization bound of the exact product, float16 and float32 weights, odd shapes") {
    Rng rng(14);
    // 303 rows of W: two whole panels and a partial one (kPanelRows = 128), not a multiple of 16;
    // 37 columns, not a whole vector. Row 17 of W is zero (scale 0: no division by zero).
    RowMatrixXf values = random_matrix(rng, 2 * kPanelRows + 47, 37);
    values.row(17).setZero();
    const RowVectorXf bias = random_matrix(rng, 1, values.rows());
    const StoredLinear f32{WeightMatrix(values), bias}, f16{WeightMatrix(WeightMatrix::HalfMatrix(values.cast<Eigen::half>())), bias};
    // This CPU's codes (127 with a VNNI kernel in oneDNN, 63 without), and 63 on every CPU, so
    // that CI on a VNNI machine covers the 7-bit codes too. 127 without VNNI saturates
    // (onednn_int8_dense.hpp): not a mode to test.
    for (const int levels : {0, 63}) {
      INFO("OnednnInt8Dense(" << levels << ")");
      OnednnInt8Dense engine(levels);
      CHECK(engine.levels() == (levels == 0 ? int8_levels() : levels));
      CHECK(engine.name() == "onednn int8 (CPU)");
      for (const StoredLinear* l : {&f32, &f16}) {
        INFO((l->weight.is_half() ? "float16" : "float32"));
        // 1 and 5 rows of x: panels of kPanelRows rows of W; 300 rows: a tall x, panels of rows / threads.
        for (Eigen::Index rows : {1, 5, 300}) {
          INFO("rows " << rows);
          RowMatrixXf x = random_matrix(rng, rows, values.cols());
          if (rows > 1) x.row(rows / 2).setZero();  // a zero row of x gives the bias alone
          check_int8_linear(engine, x, *l);
          if (rows > 1) {
            RowMatrixXf y(rows, values.rows());
            engine.linear_into(x, *l, y);
            CHECK(y.row(rows / 2) == bias);
          }
        }
        // Scale varies by row: a row of x whose magnitudes span 1e-3 .. 1e3 rounds its small values to 0.
        RowMatrixXf wide = random_matrix(rng, 3, values.cols());
        for (Eigen::Index j = 0; j < wide.cols(); ++j) wide(1, j) *= std::pow(10.0f, float(j % 7) - 3.0f);
        check_int8_linear(engine, wide, *l);
      }
      CHECK(engine.quantized_weights() == 2);
    }
    CHECK_THROWS_WITH_AS(OnednnInt8Dense(100), "onednn int8: codes up to 127 or 63, not 100", Error);
  }

  TEST_CASE("int8 stored linears: each weight is quantized once and found again by its address") {
    Rng rng(15);
    const RowMatrixXf values = random_matrix(rng, 40, 24);
    StoredLinear l{WeightMatrix(values), random_matrix(rng, 1, 40)};
    OnednnInt8Dense engine;
    const RowMatrixXf x = random_matrix(rng, 6, 24);
    const RowMatrixXf first = engine.linear(x, l);
    CHECK(engine.quantized_weights() == 1);
    CHECK(engine.linear(x, l) == first);  // the same copy: the same result, bit for bit
    CHECK(engine.quantized_weights() == 1);
    // Another weight with equal values is another entry; its results are the same.
    const StoredLinear copy = l;
    CHECK(engine.linear(x, copy) == first);
    CHECK(engine.quantized_weights() == 2);
    // A weight changed at a known address is refused, never multiplied with the stale copy.
    l.weight = WeightMatrix(RowMatrixXf(values * 2.0f));
    CHECK_THROWS_WITH_AS(engine.linear(x, l), doctest::Contains("the weight at a known address changed"), Error);
    // Bad shapes are refused before anything is quantized.
    RowMatrixXf narrow(6, 39);
    CHECK_THROWS_WITH_AS(engine.stored_affine(x, copy.weight, nullptr, narrow), doctest::Contains("into y (6x39)"), Error);
    CHECK(engine.quantized_weights() == 2);
  }

  TEST_CASE("int8 engine: the conv stem, logits and encoder attention stay float32, as OnednnDense computes them") {
    Rng rng(16);
    OnednnInt8Dense int8;
    OnednnDense float32;
    const RowMatrixXf x = random_matrix(rng, 9, 12);
    const RowMatrixXf w = random_matrix(rng, 6, 12);
    const RowVectorXf b = random_matrix(rng, 1, 6);
    const Linear l{w, b};
    CHECK(int8.linear(x, l) == float32.linear(x, l));
    const WeightMatrix e(WeightMatrix::HalfMatrix(random_matrix(rng, 70, 16).cast<Eigen::half>()));
    const RowMatrixXf x16 = random_matrix(rng, 2, 16);
    CHECK(int8.project(x16, e) == float32.project(x16, e));
    const RowMatrixXf qkv = random_matrix(rng, 11, 3 * 16);
    CHECK(int8.bidirectional_attention(qkv, 2) == float32.bidirectional_attention(qkv, 2));
    CHECK(int8.quantized_weights() == 0);
  }

  TEST_CASE("converted weights (every engine's copies): one per address, made once, nothing left by a failed make, a changed weight refused") {
    ConvertedWeights<int> copies("test engine");
    const RowMatrixXf a = RowMatrixXf::Constant(3, 4, 1.0f);
    RowMatrixXf b = RowMatrixXf::Constant(3, 4, 1.0f);
    int makes = 0;
    const auto make = [&] { return ++makes; };
    CHECK(copies.get(&a, WeightFingerprint::of(a.data(), 3, 4), make) == 1);
    CHECK(copies.get(&a, WeightFingerprint::of(a.data(), 3, 4), make) == 1);  // found again: not made again
    CHECK(copies.get(&b, WeightFingerprint::of(b.data(), 3, 4), make) == 2);  // equal values, another address
    CHECK(copies.size() == 2);
    CHECK_THROWS_WITH_AS(copies.get(&b, WeightFingerprint::of(b.data(), 2, 6), make), "test engine: the weight at a known address changed or is another one (now 2x6, was 3x4): weights must outlive the engine unchanged (dense.hpp); use one engine per model and decoder", Error);
    for (const Eigen::Index at : {Eigen::Index(0), Eigen::Index(6), Eigen::Index(11)}) {  // the sampled values: first, middle, last
      b(at / 4, at % 4) = -1.0f;
      CHECK_THROWS_AS(copies.get(&b, WeightFingerprint::of(b.data(), 3, 4), make), Error);
      b(at / 4, at % 4) = 1.0f;
    }
    b(0, 0) = -0.0f;  // bits, not values: -0 is another weight
    CHECK_THROWS_AS(copies.get(&b, WeightFingerprint::of(b.data(), 3, 4), make), Error);
    const float c = 2.0f;
    CHECK_THROWS_WITH(copies.get(&c, WeightFingerprint::of(&c, 1, 1), [] () -> int { throw Error("make failed"); }), "make failed");
    CHECK(copies.size() == 2);
    CHECK(copies.get(&c, WeightFingerprint::of(&c, 1, 1), make) == 3);
    // A WeightMatrix in float16 samples the same bits as its float values.
    const WeightMatrix half(WeightMatrix::HalfMatrix(a.cast<Eigen::half>()));
    CHECK(WeightFingerprint::of(half) == WeightFingerprint::of(a.data(), 3, 4));
    CHECK(WeightFingerprint::of(WeightMatrix(a)) == WeightFingerprint::of(a.data(), 3, 4));
  }
}
