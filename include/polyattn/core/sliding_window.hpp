// A sliding-window mask (Mistral, Gemma's local layers): a row sees only the last Window tokens of
// those its prefix mask leaves it: tokens (position - Window, position] of a causal row. The proof
// of the key-mask hook (core/key_mask.hpp): this struct is all the code a window takes, and every
// executor reads only the window's tiles. The cache still holds every token; a ring buffer that
// drops the older ones is a layout's job, not a mask's.
//   Attention<Mha, Nhd, exec::CpuSimd, float, SlidingWindow<4096>> attn(...);
//   attention<SlidingWindow<256>>(executor, q, k, v, heads, Mask::causal, out);
#pragma once

#include "polyattn/core/key_mask.hpp"

namespace polyattn {

template <int Window>
struct SlidingWindow {
  static_assert(Window >= 1, "polyattn: SlidingWindow<Window> needs Window >= 1");
  static constexpr int window = Window;
  static constexpr bool drops_keys = false;
  POLYATTN_HOST_DEVICE static constexpr KeyRange range(const QueryJob& job) {
    return {job.visible > Window ? job.visible - Window : 0, job.visible};
  }
  POLYATTN_HOST_DEVICE static constexpr bool keeps(const QueryJob&, int) { return true; }
};

}  // namespace polyattn
