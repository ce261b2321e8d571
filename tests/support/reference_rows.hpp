// The Reference executor's loops over a cached row (exec/reference/reference.hpp), declared here
// and compiled once, optimised, in support/reference_rows.cpp for every element type. In the
// precompiled header, so that every test sees them before its first use: a test compiled at a
// low level under AddressSanitizer (-O0 for FAST_AT_O0, test_mtla; -O1, test_equivalence_reference)
// then calls them instead of compiling its own copy, where those loops were most of its time.
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include <polyattn/exec/reference/reference.hpp>

#define POLYATTN_TEST_REFERENCE_ROWS(prefix, T)                                                                     \
  prefix template double polyattn::exec::reference_dot<T>(const float*, const T*, int, int, polyattn::RowScales); \
  prefix template void polyattn::exec::reference_accumulate<T>(double*, double, const T*, int, int, polyattn::RowScales);

#define POLYATTN_TEST_REFERENCE_ROW_TYPES(X, prefix) \
  X(prefix, float)                                   \
  X(prefix, double)                                  \
  X(prefix, Eigen::half)                             \
  X(prefix, Eigen::bfloat16)                         \
  X(prefix, std::int8_t)

POLYATTN_TEST_REFERENCE_ROW_TYPES(POLYATTN_TEST_REFERENCE_ROWS, extern)
