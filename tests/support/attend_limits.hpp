// The attend primitive at the limits of its scores (core/attend.hpp's contract), driven directly
// through `executor.attend(store, spec, jobs)` so that every executor runs the same cases:
// no visible token, every score -inf, leading tokens at -inf (whole score tiles and whole
// split-sequence chunks), scores that overflow float to +-inf where the Reference executor's
// double stays finite, a NaN key, and finite scores 1e30 apart or near +-FLT_MAX. Run by
// tests/test_attend_limits.cpp (Reference, CpuSimd) and tests/cuda/test_cuda_equivalence.cu.
//
// Key column 0 decides how a token scores: the query's column 0 is huge and the other columns
// are ordinary ([-1, 1]), so q.k = q_0 k_0 + O(1).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <polyattn/cache/layout_traits.hpp>
#include <polyattn/core/attend.hpp>
#include <polyattn/core/matrix.hpp>

#include "support/dense_oracle.hpp"

namespace polyattn::testing {

inline constexpr int kLimitKeyDim = 20;    // SIMD body and scalar tail on every width
inline constexpr int kLimitValueDim = 12;
inline constexpr float kInf = std::numeric_limits<float>::infinity();

/// The widths of the cases' key and value rows: the defaults above, or others where an executor
/// picks its kernel by width (exec::Cuda's streaming kernel takes 64).
struct LimitDims {
  int key = kLimitKeyDim;
  int value = kLimitValueDim;
};

/// Random keys (key_dim) and values (value_dim) of `n` tokens, key column 0 = `k0`, and a query
/// whose column 0 is `q0`.
struct LimitInputs {
  RowMatrixXf q, k, v;
  LimitInputs(int n, float q0, float k0, unsigned seed, LimitDims dims = {}) {
    std::mt19937 rng(seed);
    q = random_matrix(1, dims.key, rng);
    k = random_matrix(n, dims.key, rng);
    v = random_matrix(n, dims.value, rng);
    q(0, 0) = q0;
    k.col(0).setConstant(k0);
  }
};

/// One cache head, keys in tensor 0 and values in tensor 1, the usual 1/sqrt(key_dim) scale.
inline AttendSpec limit_spec(LimitDims dims = {}) {
  AttendSpec spec;
  spec.cache_heads = 1;
  spec.group = 1;
  spec.key_dim = dims.key;
  spec.value_dim = dims.value;
  spec.key_tensor = 0;
  spec.value_tensor = 1;
  spec.scale = float(1.0 / std::sqrt(double(dims.key)));
  return spec;
}

/// out (1, value_dim): the query over the first `visible` of the cached tokens, on a fresh store
/// (NaN past its tokens) and a fresh executor (one that mirrors the cache binds to this store).
template <class Layout, class Exec>
RowMatrixXf attend_limit(const LimitInputs& in, int visible, int threads) {
  const int n = int(in.k.rows());
  const LimitDims dims{int(in.k.cols()), int(in.v.cols())};
  const std::vector<TensorSpec> tensors{{1, dims.key}, {1, dims.value}};
  CacheStore<Layout, float> store(tensors, {.max_sequences = 2, .capacity = n + 1, .poison_unused = true});
  store.open();  // slot 0 stays empty: the sequence under test is not the first
  const int seq = store.open();
  store.grow(seq, n);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < dims.key; ++i) store.row(0, seq, t, 0)[i] = in.k(t, i);
    for (int i = 0; i < dims.value; ++i) store.row(1, seq, t, 0)[i] = in.v(t, i);
  }
  RowMatrixXf out = RowMatrixXf::Constant(1, dims.value, 12345.0f);  // overwritten by any executor
  const QueryJob job{seq, visible, in.q.data(), out.data()};
  Exec exec(threads);
  exec.attend(std::as_const(store), limit_spec(dims), std::span<const QueryJob>(&job, 1));
  return out;
}

/// Every case on one layout and executor (`threads`: its constructor's argument).
template <class Layout, class Exec>
void attend_limits_scenario(int threads, LimitDims dims = {}) {
  const double eps = 0x1p-24;
  const auto attend = [&](const LimitInputs& in, int visible) { return attend_limit<Layout, Exec>(in, visible, threads); };
  const RowMatrixXf zero = RowMatrixXf::Zero(1, dims.value);

  {
    INFO("no visible token outputs 0");
    const LimitInputs in(3, 1.0f, 0.5f, 1, dims);
    CHECK(attend(in, 0) == zero);
  }

  {
    INFO("every score -inf outputs 0");
    // Infinite keys: -inf in double too. 70 tokens: a full score tile of 64 and a partial one.
    for (int n : {1, 70, 600}) {
      INFO(n, " tokens");
      CHECK(attend(LimitInputs(n, 1.0f, -kInf, 2, dims), n) == zero);
    }
  }

  {
    INFO("leading -inf scores contribute nothing");
    // 300 of 600 tokens at -inf: whole score tiles and (split in chunks of <= 256) a whole chunk
    // before the first finite score. Once as -inf keys (-inf in double too), once as products
    // that overflow float (1e20 * -1e20: -inf in float, -1e40 in double, whose weight is 0).
    const int n = 600, masked = 300;
    for (float k0 : {-kInf, -1e20f}) {
      LimitInputs in(n, 1e20f, 0.0f, 3, dims);
      in.k.col(0).head(masked).setConstant(k0);
      const RowMatrixXf q = in.q;
      const RowMatrixXf expected =
          dense_attention(q, in.k.bottomRows(n - masked), in.v.bottomRows(n - masked), 1, 1, false, 0);
      INFO("masked key column 0 = ", k0);
      CHECK(max_abs_diff(attend(in, n), expected) <= fp32_attention_tolerance(dims.key, n - masked));
    }
  }

  {
    INFO("scores that overflow to +inf take all the weight, shared equally");
    // q_0 k_0 = 1e40: +inf in float, finite in double, where the O(1) rest of the score is below
    // the rounding (ulp(1e40) ~ 1e24), so tokens at 1e40 tie in double as in float.
    LimitInputs in(300, 1e20f, 0.0f, 4, dims);
    in.k(200, 0) = 1e20f;
    const RowMatrixXf one = attend(in, 300);
    CHECK(one == in.v.row(200));  // weight exactly 1 on it, exp(-huge) = 0 elsewhere
    in.k(30, 0) = 1e20f;  // a second one, in another score tile and another chunk
    const RowMatrixXf two = attend(in, 300);
    const RowMatrixXf mean = (0.5 * (in.v.row(30).cast<double>() + in.v.row(200).cast<double>())).cast<float>();
    CHECK(max_abs_diff(two, mean) <= 2 * eps);  // the sum of two values in [-1, 1], rounded once
  }

  {
    INFO("a NaN key gives NaN: a read of NaN-poisoned capacity shows");
    LimitInputs in(300, 1.0f, 0.0f, 6, dims);
    in.k(150, 3) = std::numeric_limits<float>::quiet_NaN();
    CHECK(attend(in, 300).array().isNaN().all());
  }

  {
    INFO("finite scores 1e30 apart and near +-FLT_MAX give the softmax's limit");
    // Scaled scores: the first tile at -3.24e38, the rest at 1.8e30, tokens 100 and 400 at
    // +3.24e38 (float's largest is 3.40e38): weights 1/2 on each of those, 0 elsewhere.
    const float scale = limit_spec(dims).scale, q0 = 1.8e19f / scale;
    LimitInputs in(600, q0, 1e11f, 5, dims);
    in.k.col(0).head(64).setConstant(-1.8e19f);
    in.k(100, 0) = in.k(400, 0) = 1.8e19f;
    const RowMatrixXf mean = (0.5 * (in.v.row(100).cast<double>() + in.v.row(400).cast<double>())).cast<float>();
    CHECK(max_abs_diff(attend(in, 600), mean) <= 2 * eps);
    // Every score at -3.24e38: they tie, so the output is the mean of the values, which sums 600
    // fp32 terms (numerator and normaliser: 2 eps (tokens + 8), as fp32_attention_tolerance).
    in.k.col(0).setConstant(-1.8e19f);
    const RowMatrixXf all_mean = in.v.cast<double>().colwise().mean().cast<float>();
    CHECK(max_abs_diff(attend(in, 600), all_mean) <= 2 * eps * (600 + 8));
  }
}

}  // namespace polyattn::testing
