// The four cross-attention cache options (baseline cross KV, K-only, one shared E-cache, hybrid)
// on the CpuSimd executor (two threads) over every layout, against MHA cross-attention computed
// densely from the encoder output (support/cross_scenarios.hpp; the Reference executor's run is in
// test_cross_cache.cpp).
#include <doctest/doctest.h>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/layers/cross_cache.hpp>

#include "support/cross_scenarios.hpp"

using namespace polyattn;
using namespace polyattn::testing;

TEST_CASE_TEMPLATE("cpu: cross-attention cache options match MHA cross-attention", Option, cross::Baseline, cross::KOnly,
                   cross::SharedE, cross::Hybrid) {
  check_cross_option<Option, Nhd, exec::CpuSimd>(100.0);
  check_cross_option<Option, Hnd, exec::CpuSimd>(100.0);
  check_cross_option<Option, Paged<16>, exec::CpuSimd>(100.0);
}
