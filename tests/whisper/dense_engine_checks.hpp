// The contract of a Dense engine (examples/whisper/dense.hpp), checked the same way for every
// engine: EigenDense in test_model.cpp, CublasDense in test_cuda.cu (on a GPU). Results are
// compared with double oracles under bounds that follow from float rounding, outputs are written
// into row blocks of NaN-filled matrices (nothing outside the block may change), and bad shapes
// must throw.
#pragma once

#include <doctest/doctest.h>

#include <whisper/dense.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dense_decoder.hpp"
#include "test_bytes.hpp"

namespace whisper_test {

inline RowMatrixXf random_matrix(Rng& rng, Eigen::Index rows, Eigen::Index cols) {
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = rng.normal_ish();
  return m;
}

// |got - want| <= (k + 2) u (|x| |W|^T + |b|) elementwise: the forward error of a float dot
// product of length k in any summation order, plus the bias addition (u = 2^-24).
inline void check_affine_bound(const RowMatrixXf& got, const RowMatrixXf& x, const RowMatrixXf& w, const RowVectorXf* bias) {
  const double u = std::ldexp(1.0, -24);
  RowMatrixXd want = x.cast<double>() * w.cast<double>().transpose();
  RowMatrixXd scale = x.cast<double>().cwiseAbs() * w.cast<double>().cwiseAbs().transpose();
  if (bias) {
    want.rowwise() += bias->cast<double>();
    scale.rowwise() += bias->cast<double>().cwiseAbs();
  }
  const RowMatrixXd bound = (double(x.cols()) + 2.0) * u * scale;
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  CHECK(((got.cast<double>() - want).cwiseAbs().array() <= bound.array()).all());
}

// Bound on |float attention - exact| for qkv (n, 3d) = [q | k | v] over `heads` heads. A score
// s = q.k / sqrt(dh) is off by at most delta = (dh + 2) u |q||k| / sqrt(dh); the softmax weights
// then by a factor exp(+-2 delta), and the weighted sum of n values adds (n + 2) u:
// |error| <= max|v| (4 delta + (n + 2) u), with a factor 2 for exp's own rounding.
inline double attention_bound(const RowMatrixXf& qkv, int heads) {
  const Eigen::Index d = qkv.cols() / 3, dh = d / heads, n = qkv.rows();
  const double u = std::ldexp(1.0, -24);
  double qk = 0;
  for (int h = 0; h < heads; ++h)
    qk = std::max(qk, (qkv.middleCols(h * dh, dh).cast<double>().cwiseAbs() *
                       qkv.middleCols(d + h * dh, dh).cast<double>().cwiseAbs().transpose()).maxCoeff());
  const double delta = double(dh + 2) * u * qk / std::sqrt(double(dh));
  return 2.0 * qkv.rightCols(d).cast<double>().cwiseAbs().maxCoeff() * (4.0 * delta + (double(n) + 2.0) * u);
}

inline void check_dense_engine(polyattn::whisper::Dense& engine) {
  using polyattn::whisper::Linear;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Rng rng(11);
  INFO("engine: " << engine.name());

  SUBCASE("linear into row blocks of any stride; nothing outside the block written") {
    // One weight for every call: a device engine keeps its copy by address (dense.hpp).
    const Linear l{random_matrix(rng, 13, 9), random_matrix(rng, 1, 13)};
    for (Eigen::Index rows : {1, 2, 7}) {
      INFO("rows " << rows);
      const RowMatrixXf wide = random_matrix(rng, rows, 20);  // x is columns [5, 14): row stride 20
      RowMatrixXf out = RowMatrixXf::Constant(rows, 30, nan);
      engine.linear_into(wide.middleCols(5, 9), l, out.middleCols(3, 13));
      check_affine_bound(out.middleCols(3, 13), wide.middleCols(5, 9), l.weight, &l.bias);
      CHECK(out.leftCols(3).array().isNaN().all());
      CHECK(out.rightCols(14).array().isNaN().all());
      // The same weight with other inputs, as a new matrix.
      const RowMatrixXf x = random_matrix(rng, rows, 9);
      check_affine_bound(engine.linear(x, l), x, l.weight, &l.bias);
    }
  }

  SUBCASE("weights as the model ships them: the tied logits and stored linears, float32 and float16, into row blocks") {
    using polyattn::whisper::StoredLinear;
    using polyattn::whisper::WeightMatrix;
    // 303 rows of W: two whole panels and a partial one (kPanelRows = 128); for the stream, four
    // whole blocks of 64 rows and a partial fifth.
    const RowMatrixXf values = random_matrix(rng, 2 * polyattn::whisper::kPanelRows + 47, 16);
    const RowVectorXf bias = random_matrix(rng, 1, values.rows());
    const WeightMatrix f32(values), f16(WeightMatrix::HalfMatrix(values.cast<Eigen::half>()));
    CHECK(!f32.is_half());
    CHECK(f16.is_half());
    CHECK(f16.bytes() * 2 == f32.bytes());
    const int threads = Eigen::nbThreads();
    // A StoredLinear holds its own copy of the weight (a float32 copy is a new buffer): it lives
    // as long as the engine, since a device engine keeps its copy by host address (dense.hpp)
    // and refuses a different weight found at an address it knows.
    const StoredLinear linear32{f32, bias}, linear16{f16, bias};
    for (const WeightMatrix* e : {&f32, &f16}) {
      INFO((e->is_half() ? "float16" : "float32"));
      const RowMatrixXf& exact = e->as_float();  // every float16 value is exact in float
      CHECK(exact.rows() == values.rows());
      // 1-8 rows of x stream W (stream_product.hpp: up to 4 rows of x per pass over W, so 5 and
      // 8 take two passes; one row of W at a time); 17 and 200 take panels, 200 being more than
      // a panel, so W is split in panels of rows() / threads.
      for (Eigen::Index rows : {1, 3, 4, 5, 8, 17, 200}) {
        INFO("rows " << rows);
        const RowMatrixXf x = random_matrix(rng, rows, 16);
        RowMatrixXf out = RowMatrixXf::Constant(rows, values.rows() + 7, nan);
        engine.project_into(x, *e, out.middleCols(2, values.rows()));
        check_affine_bound(out.middleCols(2, values.rows()), x, exact, nullptr);
        CHECK(out.leftCols(2).array().isNaN().all());
        CHECK(out.rightCols(5).array().isNaN().all());
        check_affine_bound(engine.linear(x, e->is_half() ? linear16 : linear32), x, exact, &bias);
        if (rows <= polyattn::whisper::kPanelRows) {
          // The thread count changes who multiplies a panel, never its sums (a tall x's panels
          // follow the thread count, and Eigen may block a product of another width otherwise).
          Eigen::setNbThreads(threads == 1 ? 2 : 1);
          const RowMatrixXf other = engine.project(x, *e);
          Eigen::setNbThreads(threads);
          CHECK(other == out.middleCols(2, values.rows()));
        }
      }
      RowMatrixXf lookup(1, 16);
      e->row_into(5, lookup.row(0));
      CHECK(lookup == exact.row(5));
    }
    CHECK(WeightMatrix(f16) == f16);
    CHECK(!(f16 == f32));
    // Stacking keeps float16 when every part is float16.
    const WeightMatrix both = WeightMatrix::stacked({&f16, &f16}), mixed = WeightMatrix::stacked({&f16, &f32});
    CHECK(both.is_half());
    CHECK(!mixed.is_half());
    CHECK(both.as_float().bottomRows(values.rows()) == f16.as_float());
    CHECK(mixed.as_float().topRows(values.rows()) == f16.as_float());
    CHECK(mixed.as_float().bottomRows(values.rows()) == values);
    RowMatrixXf narrow(3, values.rows() - 1);
    CHECK_THROWS_WITH_AS(engine.project_into(random_matrix(rng, 3, 16), f16, narrow), doctest::Contains("into y (3x302)"),
                         polyattn::whisper::Error);
    // 20 columns are not a whole number of vectors (8 or 16 floats): one row of x takes the panel
    // product instead of the stream.
    const RowMatrixXf odd = random_matrix(rng, 9, 20);
    CHECK(!polyattn::whisper::stream_available(1, 20));
    const RowMatrixXf x1 = random_matrix(rng, 1, 20);
    for (const WeightMatrix& e : {WeightMatrix(odd), WeightMatrix(WeightMatrix::HalfMatrix(odd.cast<Eigen::half>()))})
      check_affine_bound(engine.project(x1, e), x1, e.as_float(), nullptr);
  }

  SUBCASE("conv1d_k3: stride 1 and 2 against a direct loop") {
    const int t_in = 7, c_in = 3, c_out = 2;
    std::vector<float> w_pt(c_out * c_in * 3);  // PyTorch (C_out, C_in, 3)
    for (auto& v : w_pt) v = rng.normal_ish();
    const RowMatrixXf x = random_matrix(rng, t_in, c_in);
    const RowMatrixXf weight = polyattn::whisper::conv_weight_k_major(w_pt.data(), c_out, c_in);
    RowVectorXf bias(c_out);
    bias << 0.5f, -1.0f;
    for (int stride : {1, 2}) {
      const RowMatrixXf y = engine.conv1d_k3(x, weight, bias, stride);
      REQUIRE(y.rows() == (t_in - 1) / stride + 1);
      for (Eigen::Index t = 0; t < y.rows(); ++t)
        for (int o = 0; o < c_out; ++o) {
          double acc = bias[o], magnitude = std::abs(bias[o]);
          for (int c = 0; c < c_in; ++c)
            for (int k = 0; k < 3; ++k) {
              const Eigen::Index src = t * stride + k - 1;
              if (src < 0 || src >= t_in) continue;
              const double term = double(w_pt[static_cast<std::size_t>((o * c_in + c) * 3 + k)]) * x(src, c);
              acc += term;
              magnitude += std::abs(term);
            }
          CHECK(std::abs(y(t, o) - acc) <= (3 * c_in + 2) * std::ldexp(1.0, -24) * magnitude);
        }
    }
  }

  SUBCASE("bidirectional attention against the double oracle") {
    for (Eigen::Index n : {1, 37}) {
      INFO("frames " << n);
      const int heads = 3, dh = 8, d = heads * dh;
      const RowMatrixXf qkv = random_matrix(rng, n, 3 * d);
      const RowMatrixXd q = qkv.leftCols(d).cast<double>(), k = qkv.middleCols(d, d).cast<double>(), v = qkv.rightCols(d).cast<double>();
      const RowMatrixXf got = engine.bidirectional_attention(qkv, heads);
      CHECK((got.cast<double>() - dense_attention(q, k, v, heads, false)).cwiseAbs().maxCoeff() <= attention_bound(qkv, heads));
    }
  }

  SUBCASE("conv1d_k3_into and bidirectional_attention_into: into reused NaN-filled blocks of any row stride, as the allocating forms") {
    // The encoder reuses one block for every window (encoder.hpp): what a call leaves unwritten
    // (im2col's zero padding at both ends) would read the last window's values; NaN shows it.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int t_in = 9, c_in = 4, c_out = 5;
    std::vector<float> w_pt(c_out * c_in * 3);
    for (auto& v : w_pt) v = rng.normal_ish();
    const RowMatrixXf x = random_matrix(rng, t_in, c_in);
    const RowMatrixXf weight = polyattn::whisper::conv_weight_k_major(w_pt.data(), c_out, c_in);
    const RowVectorXf bias = random_matrix(rng, 1, c_out);
    for (int stride : {1, 2}) {
      const Eigen::Index t_out = (t_in - 1) / stride + 1;
      RowMatrixXf cols = RowMatrixXf::Constant(t_out, 3 * c_in + 2, nan), y = RowMatrixXf::Constant(t_out, c_out + 3, nan);
      engine.conv1d_k3_into(x, weight, bias, stride, cols.leftCols(3 * c_in), y.leftCols(c_out));
      CHECK(y.leftCols(c_out) == engine.conv1d_k3(x, weight, bias, stride));
      CHECK(y.rightCols(3).array().isNaN().all());
      RowMatrixXf short_cols(t_out + 1, 3 * c_in);
      CHECK_THROWS_WITH_AS(engine.conv1d_k3_into(x, weight, bias, stride, short_cols, y.leftCols(c_out)), doctest::Contains("im2col block"),
                           polyattn::whisper::Error);
    }
    const int heads = 2, dh = 8, d = heads * dh;
    const RowMatrixXf qkv = random_matrix(rng, 21, 3 * d);
    RowMatrixXf out = RowMatrixXf::Constant(21, d + 4, nan);
    engine.bidirectional_attention_into(qkv, heads, out.leftCols(d));
    CHECK(out.leftCols(d) == engine.bidirectional_attention(qkv, heads));
    CHECK(out.rightCols(4).array().isNaN().all());
    CHECK_THROWS_WITH_AS(engine.bidirectional_attention_into(qkv, heads, out.leftCols(d - 1)), doctest::Contains("output is 21x15"),
                         polyattn::whisper::Error);
  }

  SUBCASE("bad shapes throw and name the sizes") {
    const Linear l{random_matrix(rng, 4, 3), random_matrix(rng, 1, 4)};
    RowMatrixXf y(2, 4);
    CHECK_THROWS_WITH_AS(engine.linear_into(random_matrix(rng, 2, 5), l, y), doctest::Contains("x (2x5)"), polyattn::whisper::Error);
    RowMatrixXf narrow(2, 3);
    CHECK_THROWS_WITH_AS(engine.linear_into(random_matrix(rng, 2, 3), l, narrow), doctest::Contains("into y (2x3)"), polyattn::whisper::Error);
    const Linear short_bias{random_matrix(rng, 4, 3), random_matrix(rng, 1, 2)};
    CHECK_THROWS_WITH_AS(engine.linear(random_matrix(rng, 2, 3), short_bias), doctest::Contains("bias of 2 for 4"), polyattn::whisper::Error);
    const RowVectorXf one_bias = RowVectorXf::Zero(1);
    CHECK_THROWS_WITH_AS(engine.conv1d_k3(random_matrix(rng, 5, 3), random_matrix(rng, 2, 9), one_bias, 1), doctest::Contains("bias of 1 for 2"),
                         polyattn::whisper::Error);
    CHECK_THROWS_AS(engine.bidirectional_attention(random_matrix(rng, 5, 24), 5), polyattn::whisper::ModelError);
  }
}

}  // namespace whisper_test
