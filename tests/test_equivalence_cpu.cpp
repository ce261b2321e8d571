// Every KV-sharing variant (Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa) x layout on the CpuSimd executor
// (two threads; long sequences split into chunks across them) against an independent dense oracle
// (double, no cache), through the scenarios in support/equivalence_scenarios.hpp.
#include <polyattn/exec/cpu/cpu_simd.hpp>

#include "support/equivalence_combos.hpp"

TEST_CASE_TEMPLATE("cpu: the equivalence scenarios match the dense oracle", C, POLYATTN_EQUIVALENCE_COMBOS(polyattn::exec::CpuSimd)) {
  polyattn::testing::run_equivalence_scenarios<typename C::type>();
}
