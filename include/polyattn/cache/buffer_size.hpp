// The element count of a cache buffer, computed in 64 bits and checked before anything is
// allocated: a count that wrapped around would give a buffer smaller than the rows later written
// into it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "polyattn/core/error.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn::detail {

/// Elements of one tensor's buffer of `slots` token slots (sequences x capacity for the contiguous
/// layouts, pages x page size for Paged<P>) of `spec` rows each, as T; ShapeError beyond what a
/// buffer of T can address.
template <class T>
std::size_t cache_buffer_elements(std::uint64_t slots, const TensorSpec& spec) {
  const std::uint64_t limit = std::uint64_t(PTRDIFF_MAX) / sizeof(T);
  const std::uint64_t per_slot = spec.elements();
  require<ShapeError>(slots <= limit / per_slot, "a cache tensor of (", spec.heads, " heads x ", spec.dim, ") for ", slots,
                      " token slots needs more than ", limit, " elements of ", sizeof(T), " bytes: beyond what memory can address");
  return std::size_t(slots * per_slot);
}

}  // namespace polyattn::detail
