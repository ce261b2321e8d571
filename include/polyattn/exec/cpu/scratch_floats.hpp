// The CPU kernels' scratch: pre-scaled queries, scores, weights, accumulators and int8 rows
// decoded to floats. The kernels load it a whole SIMD vector at a time, so it starts on a cache
// line (cache/cache_line.hpp says what a straddling load costs).
#pragma once

#include "polyattn/cache/cache_line.hpp"

namespace polyattn::exec::cpu {

using ScratchFloats = polyattn::detail::CacheLineVector<float>;

}  // namespace polyattn::exec::cpu
