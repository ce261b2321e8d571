// Offline conversions refuse what they cannot do faithfully, with messages naming the figure;
// and the memory accounting reproduces the slim-attention seed's Whisper table.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <polyattn/convert/slim_k.hpp>
#include <polyattn/convert/x_cache.hpp>
#include <polyattn/layers/cross_cache_memory.hpp>
#include <polyattn/variants/slim_k.hpp>
#include <polyattn/variants/x_cache.hpp>

#include "support/mha_layer.hpp"
#include "support/check_throws.hpp"

using namespace polyattn;
using namespace polyattn::testing;

TEST_CASE("a singular W_k is refused") {
  std::mt19937 rng(1);
  MhaWeights w = random_mha_weights(32, 32, 10.0, rng);
  w.w_k.row(5) = w.w_k.row(2);  // exactly rank-deficient, also in float
  check_throws_with<ConversionError>([&] { convert_to_slim_k(w, {.layer = 3}); }, "layer 3: W_k is singular");
  // A zero singular value rounded to float is merely tiny: refused as ill-conditioned instead.
  MhaWeights r = random_mha_weights(32, 32, std::numeric_limits<double>::infinity(), rng);
  check_throws_with<ConversionError>([&] { convert_to_slim_k(r); }, "too ill-conditioned for float");
  w.w_k.setZero();
  check_throws_with<ConversionError>([&] { convert_to_slim_k(w); }, "W_k is singular");
}

TEST_CASE("an ill-conditioned W_k is refused for the storage type it would not fit") {
  std::mt19937 rng(2);
  const MhaWeights w = random_mha_weights(32, 32, 1e8, rng);
  // 0.1 * eps(float) * 1e8 = 1.2: nothing of V would survive in float
  check_throws_with<ConversionError>([&] { convert_to_slim_k<float>(w, {.layer = 5}); },
                                     "layer 5: W_k is too ill-conditioned for float: cond(W_k) = ");
  // ... but double holds it
  const SlimKWeights ok = convert_to_slim_k<double>(w);
  CHECK(ok.report.cond_k == doctest::Approx(1e8).epsilon(0.1));  // W_k rounded to float moves it
  // half (eps ~ 1e-3) already refuses cond 1e3
  const MhaWeights w3 = random_mha_weights(32, 32, 1e3, rng);
  check_throws_with<ConversionError>([&] { convert_to_slim_k<Eigen::half>(w3); }, "too ill-conditioned for half");
  CHECK_NOTHROW(convert_to_slim_k<float>(w3));
}

TEST_CASE("W_kv beyond the storage type's range is refused") {
  std::mt19937 rng(3);
  MhaWeights w = random_mha_weights(32, 32, 10.0, rng);
  w.w_k *= 1e-6f;  // W_k^-1 ~ 1e6: max|W_kv| ~ 1e5 > 65504
  const SlimKWeights f = convert_to_slim_k<float>(w);
  MESSAGE(f.report.summary());
  CHECK(f.report.max_abs_w_kv > 65504);
  check_throws_with<ConversionError>([&] { convert_to_slim_k<Eigen::half>(w); }, "exceeds the largest half (65504)");
}

TEST_CASE("shapes slim attention cannot convert are refused") {
  std::mt19937 rng(4);
  MhaWeights w = random_mha_weights(64, 32, 10.0, rng);  // e < d
  check_throws_with<ConversionError>([&] { convert_to_slim_k(w); }, "W_k is 64 x 32 with e < d");
  MhaWeights r = random_mha_weights(32, 32, 10.0, rng);  // key bias + RoPE
  check_throws_with<ConversionError>([&] { convert_to_slim_k(r, {.rope = true}); }, "the key bias only cancels without RoPE");
  r.b_k.resize(0);
  CHECK_NOTHROW(convert_to_slim_k(r, {.rope = true}));
  check_throws_with<ShapeError>([&] { SlimK2::validate({4, 8}, {RowMatrixXf::Zero(32, 31)}); }, "W_kv is 32 x 31, expected e x e");
  check_throws_with<ShapeError>([&] { XCache::validate({4, 8, 16}, make_x_cache_params(r, {4, 8})); }, "W_q is 32 x 32, expected 16 x 32");
}

TEST_CASE("bias folding: b_o' = b_v W_o + b_o, the key bias dropped") {
  std::mt19937 rng(6);
  const MhaWeights w = random_mha_weights(16, 16, 10.0, rng);
  const SlimKWeights s = convert_to_slim_k(w);
  CHECK(s.report.dropped_key_bias);
  const Eigen::RowVectorXf expected = w.b_v * w.w_o + w.b_o;
  CHECK((s.b_o - expected).cwiseAbs().maxCoeff() <= 1e-6f);
  // W_k W_kv = W_v
  CHECK((w.w_k * s.w_kv - w.w_v).cwiseAbs().maxCoeff() <= 1e-5f);
}

TEST_CASE("the memory accounting reproduces the seed's Whisper table") {
  // Seed, slim-attention §6 (in millions; speedups as printed).
  struct Row {
    double e, cross, self, base, opt1, opt2, savings, pb, p1, p2, r1b, r1o1, r1o2, s1o1, s1o2, r64b, r64o1, r64o2, s64o1, s64o2;
  };
  const Row seed[5] = {
      {0.6, 4.6, 1.4, 6.0, 3.0, 0.7, 8.7, 28.2, 28.8, 29.4, 34.2, 31.8, 30.0, 1.08, 1.14, 6.4, 3.4, 1.1, 1.9, 5.6},
      {0.8, 9.2, 2.8, 12.0, 6.0, 1.4, 8.7, 48.6, 50.1, 51.7, 60.5, 56.1, 53.1, 1.08, 1.14, 12.7, 6.8, 2.2, 1.9, 5.8},
      {1.2, 27.6, 8.3, 35.9, 18.0, 4.1, 8.7, 138.9, 146.0, 153.1, 174.8, 164.0, 157.2, 1.07, 1.11, 38.1, 20.2, 6.5, 1.9, 5.8},
      {1.5, 73.7, 22.0, 95.7, 47.9, 11.0, 8.7, 405.4, 430.6, 455.8, 501.2, 478.5, 466.8, 1.05, 1.07, 102.1, 54.6, 18.1, 1.9, 5.6},
      {1.9, 122.9, 36.7, 159.6, 79.8, 18.4, 8.7, 800.4, 852.8, 905.2, 960.0, 932.6, 923.6, 1.03, 1.04, 172.1, 93.1, 32.5, 1.8, 5.3},
  };
  auto rounds_to = [](double value, double printed, double unit) {
    INFO(value, " printed as ", printed);
    CHECK(std::abs(value - printed) <= 0.5 * unit + 1e-9);
  };
  for (int i = 0; i < 5; ++i) {
    const CrossCacheMemory m = cross_cache_memory(kWhisperShapes[std::size_t(i)]);
    const Row& r = seed[i];
    INFO(kWhisperShapes[std::size_t(i)].name);
    const double M = 1e6;
    rounds_to(m.e_cache / M, r.e, 0.1);
    rounds_to(m.cross_kv / M, r.cross, 0.1);
    rounds_to(m.self_kv / M, r.self, 0.1);
    rounds_to(m.baseline / M, r.base, 0.1);
    rounds_to(m.option1 / M, r.opt1, 0.1);
    rounds_to(m.option2 / M, r.opt2, 0.1);
    rounds_to(m.option2_savings(), r.savings, 0.1);
    rounds_to(m.params_baseline / M, r.pb, 0.1);
    rounds_to(m.params_option1 / M, r.p1, 0.1);
    rounds_to(m.params_option2 / M, r.p2, 0.1);
    rounds_to(m.reads_baseline(1) / M, r.r1b, 0.1);
    rounds_to(m.reads_option1(1) / M, r.r1o1, 0.1);
    rounds_to(m.reads_option2(1) / M, r.r1o2, 0.1);
    rounds_to(m.option1_speedup(1), r.s1o1, 0.01);
    rounds_to(m.option2_speedup(1), r.s1o2, 0.01);
    rounds_to(m.reads_baseline(64) / M, r.r64b, 0.1);
    rounds_to(m.reads_option1(64) / M, r.r64o1, 0.1);
    rounds_to(m.reads_option2(64) / M, r.r64o2, 0.1);
    rounds_to(m.option1_speedup(64), r.s64o1, 0.1);
    rounds_to(m.option2_speedup(64), r.s64o2, 0.1);
  }
  static_assert(cross_cache_memory(kWhisperShapes[0]).cross_kv == 2.0 * 1500 * 384 * 4);  // constexpr from shapes
}
