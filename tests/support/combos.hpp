// The Attention types the typed tests instantiate, as doctest template parameters: one Combo
// type, and one list per family of tests, each for whichever executor a test runs
// (exec::Reference, exec::CpuSimd, exec::Cuda, the dispatched CPU kernels). Every CPU and CUDA
// test takes its combinations from here, so a layout added to a family reaches each executor's
// test of it. A list is a macro because doctest takes the types as TEST_CASE_TEMPLATE's
// arguments; wrap a variant with commas in an alias first (using MtlaS3 = Mtla<16, 3, 4>).
// Each list is instantiated once per translation unit, by one TEST_CASE_TEMPLATE.
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/core/key_mask.hpp>
#include <polyattn/core/sliding_window.hpp>
#include <polyattn/variants/mha_gqa.hpp>

namespace polyattn::testing {

/// One combination: variant V on cache layout L, executor E, cache element T, key mask M.
template <class V, class L, class E, class T = float, class M = PrefixMask>
struct Combo {
  using variant = V;
  using layout = L;
  using executor = E;
  using element = T;
  using type = Attention<V, L, E, T, M>;
};

}  // namespace polyattn::testing

/// The layouts every family runs on: token-major, head-major, pages that divide the executors'
/// 64-token tiles and pages that do not.
#define POLYATTN_LAYOUT_COMBOS(V, E, ...)                                                                          \
  ::polyattn::testing::Combo<V, ::polyattn::Nhd, E __VA_OPT__(, ) __VA_ARGS__>,                                   \
      ::polyattn::testing::Combo<V, ::polyattn::Hnd, E __VA_OPT__(, ) __VA_ARGS__>,                               \
      ::polyattn::testing::Combo<V, ::polyattn::Paged<16>, E __VA_OPT__(, ) __VA_ARGS__>,                         \
      ::polyattn::testing::Combo<V, ::polyattn::Paged<7>, E __VA_OPT__(, ) __VA_ARGS__>

/// A family's list for V on both CPU executors, Reference then CpuSimd:
/// POLYATTN_ON_CPU_EXECUTORS(POLYATTN_FORK_COMBOS, Mha).
#define POLYATTN_ON_CPU_EXECUTORS(FAMILY, V) FAMILY(V, ::polyattn::exec::Reference), FAMILY(V, ::polyattn::exec::CpuSimd)

/// The KV-sharing variants (support/equivalence_scenarios.hpp): Mha, Gqa<2>, Gqa<4>, Gqa<8>, Mqa
/// on every layout.
#define POLYATTN_EQUIVALENCE_COMBOS(E)                                                                               \
  POLYATTN_LAYOUT_COMBOS(::polyattn::Mha, E), POLYATTN_LAYOUT_COMBOS(::polyattn::Gqa<2>, E),                        \
      POLYATTN_LAYOUT_COMBOS(::polyattn::Gqa<4>, E), POLYATTN_LAYOUT_COMBOS(::polyattn::Gqa<8>, E),                 \
      POLYATTN_LAYOUT_COMBOS(::polyattn::Mqa, E)

/// Mla (support/latent_scenarios.hpp): every layout.
#define POLYATTN_MLA_COMBOS(V, E) POLYATTN_LAYOUT_COMBOS(V, E)

/// Mtla (support/latent_scenarios.hpp): pages of 4 and 3 rows hold a few merged slots each, so
/// a stride of 1 to 4 opens and merges slots across page boundaries (and a page of 3 is smaller
/// than a stride of 4).
#define POLYATTN_MTLA_COMBOS(V, E)                                                                                 \
  ::polyattn::testing::Combo<V, ::polyattn::Nhd, E>, ::polyattn::testing::Combo<V, ::polyattn::Hnd, E>,             \
      ::polyattn::testing::Combo<V, ::polyattn::Paged<4>, E>, ::polyattn::testing::Combo<V, ::polyattn::Paged<3>, E>

/// Forks (support/fork_scenarios.hpp): the 10-token prefix fills two pages of 4 and part of a
/// third, so a fork shares two pages and copies one.
#define POLYATTN_FORK_COMBOS(V, E)                                                                                 \
  ::polyattn::testing::Combo<V, ::polyattn::Nhd, E>, ::polyattn::testing::Combo<V, ::polyattn::Hnd, E>,             \
      ::polyattn::testing::Combo<V, ::polyattn::Paged<4>, E>

/// Sliding windows (support/window_scenarios.hpp): a window of 24 tokens on every layout.
#define POLYATTN_WINDOW_COMBOS(V, E) POLYATTN_LAYOUT_COMBOS(V, E, float, ::polyattn::SlidingWindow<24>)

/// 16-bit and int8 caches, read by executor E and compared with Reference over the same cache:
/// both contiguous layouts and pages that divide the tile, for each element type.
#define POLYATTN_ELEMENT_LAYOUTS(V, E, T)                                                                          \
  ::polyattn::testing::Combo<V, ::polyattn::Nhd, E, T>, ::polyattn::testing::Combo<V, ::polyattn::Hnd, E, T>,       \
      ::polyattn::testing::Combo<V, ::polyattn::Paged<16>, E, T>
#define POLYATTN_ELEMENT_COMBOS(V, E)                                                                              \
  POLYATTN_ELEMENT_LAYOUTS(V, E, ::Eigen::half), POLYATTN_ELEMENT_LAYOUTS(V, E, ::Eigen::bfloat16),                 \
      POLYATTN_ELEMENT_LAYOUTS(V, E, std::int8_t)
