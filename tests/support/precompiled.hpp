// The headers most tests include, precompiled once for all of them (tests/CMakeLists.txt,
// polyattn_test_pch). Only headers whose meaning no test changes with a macro of its own: each
// test still includes what it uses, so a test builds the same without this file. The standard
// headers the tests use come in through these.
#pragma once

#include <Eigen/Dense>
#include <doctest/doctest.h>

#include <polyattn/polyattn.hpp>  // the library: attention, layouts, Reference and CpuSimd (xsimd)

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
#include "support/reference_rows.hpp"
#include "support/tile_kernels.hpp"
