// The attend primitive's semantics at the limits of its scores, the same on every CPU executor
// (core/attend.hpp): no visible token or every score -inf gives 0, -inf tokens weigh nothing
// (whole tiles and chunks of them included), scores that overflow float share the weight instead
// of giving NaN, finite scores near +-FLT_MAX give the softmax's limit. Cases in
// support/attend_limits.hpp (the CUDA test runs them too).
#include <doctest/doctest.h>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/exec/reference/reference.hpp>

#include "support/attend_limits.hpp"

using namespace polyattn;
using namespace polyattn::testing;

TEST_CASE_TEMPLATE("-inf, overflowing and huge scores: the same limits on every CPU executor", Layout, Nhd, Paged<7>) {
  {
    INFO("reference");
    attend_limits_scenario<Layout, exec::Reference>(1);
  }
  for (int threads : {1, 2}) {
    INFO("cpu, ", threads, " thread(s)");
    attend_limits_scenario<Layout, exec::CpuSimd>(threads);
  }
}
