// The KV-sharing variants x layouts of the equivalence suite, for one executor: the list a
// test_equivalence_<executor>.cpp instantiates once (one TEST_CASE_TEMPLATE running every
// scenario of support/equivalence_scenarios.hpp), each executor in its own translation unit so
// that the build spreads them over cores.
#pragma once

#include <doctest/doctest.h>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/variants/mha_gqa.hpp>

#include "support/equivalence_scenarios.hpp"

namespace polyattn::testing {

template <class V, class L, class E>
struct EquivalenceCombo {
  using type = Attention<V, L, E, float>;
};

/// Every scenario for one Attention type, each as a doctest subcase.
template <class A>
void run_equivalence_scenarios() {
  SUBCASE("prefill then batched decode matches the dense oracle") { prefill_then_batched_decode_scenario<A>(); }
  SUBCASE("long sequences split across threads match the dense oracle") { long_sequence_scenario<A>(); }
  SUBCASE("encoder prefill (full mask) and cross-attention attend match the dense oracle") {
    encoder_and_cross_attention_scenario<A>();
  }
  SUBCASE("a closed sequence's slot is reused without reading its old rows") { reopened_slot_scenario<A>(); }
}

}  // namespace polyattn::testing

#define POLYATTN_EQUIVALENCE_LAYOUTS_FOR(V, E)                                                                      \
  polyattn::testing::EquivalenceCombo<V, polyattn::Nhd, E>, polyattn::testing::EquivalenceCombo<V, polyattn::Hnd, E>, \
      polyattn::testing::EquivalenceCombo<V, polyattn::Paged<16>, E>, polyattn::testing::EquivalenceCombo<V, polyattn::Paged<7>, E>
/// Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa on Nhd, Hnd, Paged<16>, Paged<7>, executor E.
#define POLYATTN_EQUIVALENCE_COMBOS(E)                                                                             \
  POLYATTN_EQUIVALENCE_LAYOUTS_FOR(polyattn::Mha, E), POLYATTN_EQUIVALENCE_LAYOUTS_FOR(polyattn::Gqa<2>, E),        \
      POLYATTN_EQUIVALENCE_LAYOUTS_FOR(polyattn::Gqa<4>, E), POLYATTN_EQUIVALENCE_LAYOUTS_FOR(polyattn::Gqa<8>, E), \
      POLYATTN_EQUIVALENCE_LAYOUTS_FOR(polyattn::Mqa, E)
