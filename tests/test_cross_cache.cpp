// The four cross-attention cache options of an encoder-decoder model (baseline cross KV, K-only,
// one shared E-cache, hybrid) against MHA cross-attention computed densely from the encoder
// output, over several layers, sequences of different encoder lengths and repeated steps: on the
// Reference executor here, on CpuSimd over every layout in test_cross_cache_cpu.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/layers/cross_cache.hpp>
#include <polyattn/layers/cross_cache_memory.hpp>

#include "support/cross_scenarios.hpp"
#include "support/dense_oracle.hpp"
#include "support/mha_layer.hpp"

using namespace polyattn;
using namespace polyattn::testing;

TEST_CASE_TEMPLATE("reference: cross-attention cache options match MHA cross-attention", Option, cross::Baseline, cross::KOnly,
                   cross::SharedE, cross::Hybrid) {
  check_cross_option<Option, Paged<16>, exec::Reference>(100.0);
}

// The cache element type is the caller's, as for Attention: a half cache halves every option's
// bytes (cache_bytes per frame against sizeof(T)) and stays within half rounding of MHA.
TEST_CASE_TEMPLATE("reference: cross-attention cache options over a half-precision cache", Option, cross::Baseline, cross::KOnly,
                   cross::SharedE, cross::Hybrid) {
  check_cross_option<Option, Nhd, exec::Reference, Eigen::half>(10.0);
}

TEST_CASE("the hybrid refuses a non-square first-layer W_k") {
  std::mt19937 rng(2);
  std::vector<MhaWeights> layers{random_mha_weights(48, 64, 10.0, rng), random_mha_weights(48, 64, 10.0, rng)};
  using Cross = CrossAttention<cross::Hybrid, Nhd, exec::Reference>;
  CHECK_THROWS_WITH_AS(Cross({4, 16, 48}, layers, {}, 1), doctest::Contains("must be square"), ShapeError);
}

// A layer's first attend projects the encoder output of every sequence of the batch into its
// cache: with a paged pool that cannot hold them all, it refuses before projecting any (the
// per-sequence checks of set_encoder_output pass: nothing is written until that attend).
TEST_CASE("a first attend whose encoder outputs overflow the page pool caches nothing") {
  const AttentionShape shape{2, 8};
  std::mt19937 rng(3);
  const std::vector<MhaWeights> layers{random_mha_weights(16, 16, 10.0, rng)};
  CrossAttention<cross::Baseline, Paged<16>, exec::Reference> cross(
      shape, layers, {.max_sequences = 2, .capacity = 32, .pool_pages = 3, .poison_unused = true}, 1);
  const int a = cross.open_sequence(), b = cross.open_sequence();
  cross.set_encoder_output(a, random_matrix(20, 16, rng));  // 2 pages each, 3 in the pool
  cross.set_encoder_output(b, random_matrix(20, 16, rng));
  const int ab[] = {a, b};
  RowMatrixXf y(2, 16);
  CHECK_THROWS_WITH_AS(cross.attend(0, ab, random_matrix(2, 16, rng), y),
                       doctest::Contains("the 2 sequences of this call need 4 more page(s) of 16 tokens together, 3 of 3 are free"),
                       CapacityError);
  CHECK(cross.cache_bytes(a) == 0);
  CHECK(cross.cache_bytes(b) == 0);
  const int only_a[] = {a};  // one of them fits, and still has its encoder output
  cross.attend(0, only_a, random_matrix(1, 16, rng), y.topRows(1));
  CHECK(cross.cache_bytes(a) == 20 * cross.cache_bytes_per_frame());
}

// The encoder-output projections (E W_k, E W_v at a sequence's first attend) can run on the
// caller's GEMM (the Whisper example passes oneDNN's). A counting projection that computes as
// Eigen does gives the default's outputs bit for bit, and runs once per product: Baseline two
// per layer, KOnly one, Hybrid one for layer 0's K_0, SharedE none; a later attend runs none.
namespace {
int projections_run = 0;
void counting_projection(ConstMatrixRef x, ConstMatrixRef w, MatrixRef y) {
  ++projections_run;
  y.noalias() = x * w;
}
void failing_projection(ConstMatrixRef, ConstMatrixRef, MatrixRef) { throw std::runtime_error("the caller's GEMM failed"); }
}  // namespace

TEST_CASE_TEMPLATE("a caller's encoder projection runs each product of the first attend once, with Eigen's outputs", Option, cross::Baseline,
                   cross::KOnly, cross::SharedE, cross::Hybrid) {
  const AttentionShape shape{2, 8};
  std::mt19937 rng(5);
  const std::vector<MhaWeights> layers{random_mha_weights(16, 16, 10.0, rng), random_mha_weights(16, 16, 10.0, rng)};
  using Cross = CrossAttention<Option, Nhd, exec::Reference>;
  Cross plain(shape, layers, {.max_sequences = 1, .capacity = 32}, 1), hooked(shape, layers, {.max_sequences = 1, .capacity = 32}, 1);
  hooked.set_encoder_projection(&counting_projection);
  const RowMatrixXf e = random_matrix(20, 16, rng);
  const int a = plain.open_sequence(), b = hooked.open_sequence();
  plain.set_encoder_output(a, e);
  hooked.set_encoder_output(b, e);
  projections_run = 0;
  for (int step = 0; step < 2; ++step)
    for (int layer = 0; layer < 2; ++layer) {
      const RowMatrixXf x = random_matrix(1, 16, rng);
      RowMatrixXf want(1, 16), got(1, 16);
      const int sa[] = {a}, sb[] = {b};
      plain.attend(layer, sa, x, want);
      hooked.attend(layer, sb, x, got);
      CHECK(got == want);
    }
  const int expected = std::is_same_v<Option, cross::Baseline> ? 4 : std::is_same_v<Option, cross::KOnly> ? 2
                       : std::is_same_v<Option, cross::Hybrid> ? 1 : 0;
  CHECK(projections_run == expected);
}

TEST_CASE("a caller's encoder projection that throws leaves the cache as it was") {
  const AttentionShape shape{2, 8};
  std::mt19937 rng(6);
  const std::vector<MhaWeights> layers{random_mha_weights(16, 16, 10.0, rng)};
  CrossAttention<cross::Baseline, Nhd, exec::Reference> cross(shape, layers, {.max_sequences = 1, .capacity = 32}, 1);
  const int a = cross.open_sequence();
  cross.set_encoder_output(a, random_matrix(20, 16, rng));
  cross.set_encoder_projection(&failing_projection);
  const int sa[] = {a};
  RowMatrixXf y(1, 16);
  const RowMatrixXf x = random_matrix(1, 16, rng);
  CHECK_THROWS_WITH(cross.attend(0, sa, x, y), "the caller's GEMM failed");
  CHECK(cross.cache_bytes(a) == 0);
  cross.set_encoder_projection(nullptr);  // back to Eigen's: the encoder output is still there
  cross.attend(0, sa, x, y);
  CHECK(cross.cache_bytes(a) == 20 * cross.cache_bytes_per_frame());
}
