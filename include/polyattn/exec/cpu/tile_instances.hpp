// CpuSimd's tile kernels for one architecture, compiled in one translation unit of a program
// instead of in each unit that runs the executor:
//
//   // kernels.hpp, included by every unit before its first use of CpuSimd
//   #include <polyattn/exec/cpu/tile_instances.hpp>
//   POLYATTN_EXTERN_CPU_TILE_KERNELS(xsimd::avx512bw)
//
//   // tile_kernels.cpp, built with the same flags as the units that declare them
//   #include "kernels.hpp"
//   POLYATTN_CPU_TILE_KERNELS(xsimd::avx512bw)
//
// The tile kernels (decode_tile.hpp, block_tile.hpp) depend only on the architecture, the element
// type read and the tile source (NextTile), never on the variant, the layout or the key mask, so
// every (key mask, cache store) pair a unit runs instantiates the same few of them. They are most
// of the code the executor generates: in the test suite's release build, the second and later
// copies of score_tile's score_rows and score_slices were 13% of all object code (one copy in
// each of up to 19 units). The macros name every instance the executor's
// decode and prefill kernels call (attend_chunk, attend_block); a program that calls a kernel
// with another tile source instantiates that one itself, as usual. Write them at global scope.
//
// This only moves work between translation units: the code is the same, called across units
// instead of inlined (a call per tile and per head block, against kTile rows of work).
#pragma once

#include <cstddef>
#include <cstdint>

#include <Eigen/Core>

#include "polyattn/core/row_scales.hpp"
#include "polyattn/exec/cpu/block_tile.hpp"
#include "polyattn/exec/cpu/decode_tile.hpp"

/// Instantiates ARCH's tile kernels for decode (score_tile, accumulate_weights by head,
/// accumulate_int8_tile; a tile of one run of the store or gathered from kTileRuns runs) and for
/// prefill (score_block, accumulate_weights by token), for every element type CpuSimd reads.
#define POLYATTN_CPU_TILE_KERNELS(ARCH) POLYATTN_CPU_TILE_KERNELS_ALL_(template, ARCH)
/// Declares them in the units that call them.
#define POLYATTN_EXTERN_CPU_TILE_KERNELS(ARCH) POLYATTN_CPU_TILE_KERNELS_ALL_(extern template, ARCH)

// The parts: KIND is `template` (a definition) or `extern template` (a declaration).
#define POLYATTN_CPU_TILE_KERNELS_ALL_(KIND, ARCH)                                                                         \
  POLYATTN_CPU_TILE_KERNELS_DECODE_(KIND, ARCH, ::polyattn::exec::cpu::NextTile<1>)                                       \
  POLYATTN_CPU_TILE_KERNELS_DECODE_(KIND, ARCH, ::polyattn::exec::cpu::NextTile<::polyattn::exec::cpu::kTileRuns>)        \
  POLYATTN_CPU_TILE_KERNELS_PREFILL_(KIND, ARCH, float)                                                                   \
  POLYATTN_CPU_TILE_KERNELS_PREFILL_(KIND, ARCH, ::Eigen::half)                                                           \
  POLYATTN_CPU_TILE_KERNELS_PREFILL_(KIND, ARCH, ::Eigen::bfloat16)
#define POLYATTN_CPU_TILE_KERNELS_SCORE_(KIND, ARCH, NEXT, T)                                                              \
  KIND void ::polyattn::exec::cpu::score_tile<ARCH, T, NEXT>(const float*, int, const ::polyattn::exec::cpu::KeyTile<T, NEXT>&, \
                                                             float*);
#define POLYATTN_CPU_TILE_KERNELS_VALUES_(KIND, ARCH, NEXT, T, BY_TOKEN)                                                   \
  KIND void ::polyattn::exec::cpu::accumulate_weights<ARCH, T, BY_TOKEN, NEXT>(                                            \
      const float*, ::polyattn::exec::cpu::WeightIndex<BY_TOKEN>, int, ::polyattn::exec::cpu::TileRows<T>, int, float*, int,  \
      int, NEXT*);
// Decode: each element type's score pass; the value pass of 16- and 32-bit rows, and of int8 rows
// (accumulate_int8_tile: the weights scaled by each segment's scale, then accumulate_weights).
#define POLYATTN_CPU_TILE_KERNELS_DECODE_(KIND, ARCH, NEXT)                                                                \
  POLYATTN_CPU_TILE_KERNELS_SCORE_(KIND, ARCH, NEXT, float)                                                               \
  POLYATTN_CPU_TILE_KERNELS_SCORE_(KIND, ARCH, NEXT, ::Eigen::half)                                                       \
  POLYATTN_CPU_TILE_KERNELS_SCORE_(KIND, ARCH, NEXT, ::Eigen::bfloat16)                                                   \
  POLYATTN_CPU_TILE_KERNELS_SCORE_(KIND, ARCH, NEXT, ::std::int8_t)                                                       \
  POLYATTN_CPU_TILE_KERNELS_VALUES_(KIND, ARCH, NEXT, float, false)                                                       \
  POLYATTN_CPU_TILE_KERNELS_VALUES_(KIND, ARCH, NEXT, ::Eigen::half, false)                                               \
  POLYATTN_CPU_TILE_KERNELS_VALUES_(KIND, ARCH, NEXT, ::Eigen::bfloat16, false)                                           \
  KIND void ::polyattn::exec::cpu::accumulate_int8_tile<ARCH, NEXT>(const float*, int,                                     \
                                                                    ::polyattn::exec::cpu::TileRows<::std::int8_t>, int, \
                                                                    ::polyattn::RowScales, float*, float*, NEXT*);
// Prefill reads float, half and bfloat16 rows (int8 rows are decoded to float first: tile_rows).
#define POLYATTN_CPU_TILE_KERNELS_PREFILL_(KIND, ARCH, T)                                                                  \
  KIND void ::polyattn::exec::cpu::score_block<ARCH, T>(const T*, ::std::ptrdiff_t, int, int, const float*, ::std::ptrdiff_t, \
                                                        int, int, float*, ::std::ptrdiff_t, float*, const float*, float*); \
  POLYATTN_CPU_TILE_KERNELS_VALUES_(KIND, ARCH, ::polyattn::exec::cpu::NextTile<1>, T, true)
