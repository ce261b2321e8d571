// The four cross-attention cache options of an encoder-decoder model (baseline cross KV, K-only,
// one shared E-cache, hybrid) against MHA cross-attention computed densely from the encoder
// output, over several layers, sequences of different encoder lengths and repeated steps.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/variants/cross_cache.hpp>
#include <polyattn/variants/cross_cache_memory.hpp>

#include "support/cross_scenarios.hpp"
#include "support/dense_oracle.hpp"
#include "support/mha_layer.hpp"

using namespace polyattn;
using namespace polyattn::testing;

TEST_CASE_TEMPLATE("cross-attention cache options match MHA cross-attention", Option, cross::Baseline, cross::KOnly, cross::SharedE,
                   cross::Hybrid) {
  check_cross_option<Option, Nhd, exec::CpuSimd>(100.0);
  check_cross_option<Option, Paged<16>, exec::Reference>(100.0);
}

TEST_CASE("the hybrid refuses a non-square first-layer W_k") {
  std::mt19937 rng(2);
  std::vector<MhaWeights> layers{random_mha_weights(48, 64, 10.0, rng), random_mha_weights(48, 64, 10.0, rng)};
  using Cross = CrossAttention<cross::Hybrid>;
  CHECK_THROWS_WITH_AS(Cross({4, 16, 48}, layers, {}, 1), doctest::Contains("must be square"), ShapeError);
}
