// The headers most tests include, precompiled once for all of them (tests/CMakeLists.txt,
// polyattn_test_pch). Only headers whose meaning no test changes with a macro of its own: each
// test still includes what it uses, so a test builds the same without this file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Dense>
#include <doctest/doctest.h>
#include <xsimd/xsimd.hpp>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cpu/cpu_simd.hpp>
#include <polyattn/exec/reference/reference.hpp>
#include <polyattn/polyattn.hpp>

#include "support/combos.hpp"
#include "support/dense_oracle.hpp"
