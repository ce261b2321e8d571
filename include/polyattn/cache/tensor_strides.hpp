// Where a cached row lives: one formula for every layout, used by the host stores and by the CUDA
// mirror (exec/cuda/device_layout.hpp) alike. A sequence's tokens are split into pages; the
// contiguous layouts have one page per sequence, of `capacity` tokens.
//
//   offset(page, token in page, head) = page * strides.page + token * strides.token + head * strides.head
//
// in elements of one cached tensor, whose rows are `dim` contiguous elements. Each layout tag
// says its strides for a page of `page_tokens` tokens (Nhd::strides, Hnd::strides,
// Paged<P>::strides).
#pragma once

#include <cstdint>

#include "polyattn/core/host_device.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

/// Strides of one cached tensor, in elements.
struct TensorStrides {
  std::int64_t page = 0;   ///< between pages (contiguous layouts: between sequences)
  std::int64_t token = 0;  ///< between consecutive tokens of a page
  std::int64_t head = 0;   ///< between heads of one token

  POLYATTN_HOST_DEVICE std::int64_t offset(int page_index, int token_in_page, int head_index) const {
    return std::int64_t(page_index) * page + std::int64_t(token_in_page) * token + std::int64_t(head_index) * head;
  }
};

/// (page, token, head, dim): a token's heads are adjacent.
constexpr TensorStrides token_major_strides(const TensorSpec& s, int page_tokens) {
  return {std::int64_t(page_tokens) * s.heads * s.dim, std::int64_t(s.heads) * s.dim, s.dim};
}

/// (page, head, token, dim): a head's tokens are adjacent, so decode streams each head's rows.
constexpr TensorStrides head_major_strides(const TensorSpec& s, int page_tokens) {
  return {std::int64_t(s.heads) * page_tokens * s.dim, s.dim, std::int64_t(page_tokens) * s.dim};
}

}  // namespace polyattn
