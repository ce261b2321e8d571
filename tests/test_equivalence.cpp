// Every variant x layout x CPU executor against an independent dense oracle (double, no cache),
// through the scenarios in support/equivalence_scenarios.hpp (the CUDA test runs the same ones).
#include <doctest/doctest.h>

#include <polyattn/polyattn.hpp>

#include "support/equivalence_scenarios.hpp"

using namespace polyattn;
using namespace polyattn::testing;

template <class V, class L, class E>
struct Combo {
  using type = Attention<V, L, E, float>;
};

#define POLYATTN_COMBOS_FOR(V)                                                                                       \
  Combo<V, Nhd, exec::Reference>, Combo<V, Hnd, exec::Reference>, Combo<V, Paged<16>, exec::Reference>,           \
      Combo<V, Paged<7>, exec::Reference>, Combo<V, Nhd, exec::CpuSimd>, Combo<V, Hnd, exec::CpuSimd>,             \
      Combo<V, Paged<16>, exec::CpuSimd>, Combo<V, Paged<7>, exec::CpuSimd>
#define POLYATTN_ALL_COMBOS POLYATTN_COMBOS_FOR(Mha), POLYATTN_COMBOS_FOR(Gqa<2>), POLYATTN_COMBOS_FOR(Mqa)

TEST_CASE_TEMPLATE("prefill then batched decode matches the dense oracle", C, POLYATTN_ALL_COMBOS) {
  prefill_then_batched_decode_scenario<typename C::type>();
}

TEST_CASE_TEMPLATE("long sequences split across threads match the dense oracle", C, POLYATTN_ALL_COMBOS) {
  long_sequence_scenario<typename C::type>();
}

TEST_CASE_TEMPLATE("encoder prefill (full mask) and cross-attention attend match the dense oracle", C, POLYATTN_ALL_COMBOS) {
  encoder_and_cross_attention_scenario<typename C::type>();
}

TEST_CASE_TEMPLATE("a closed sequence's slot is reused without reading its old rows", C, POLYATTN_ALL_COMBOS) {
  reopened_slot_scenario<typename C::type>();
}
