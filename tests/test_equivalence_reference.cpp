// Every KV-sharing variant (Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa) x layout on the Reference executor
// against an independent dense oracle (double, no cache), through the scenarios in
// support/equivalence_scenarios.hpp (test_equivalence_cpu.cpp and the CUDA test run the same ones).
#include <polyattn/exec/reference/reference.hpp>

#include "support/combos.hpp"
#include "support/equivalence_scenarios.hpp"

TEST_CASE_TEMPLATE("reference: the equivalence scenarios match the dense oracle", C, POLYATTN_EQUIVALENCE_COMBOS(polyattn::exec::Reference)) {
  polyattn::testing::run_equivalence_scenarios<typename C::type>();
}
