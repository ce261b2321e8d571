// Attention over keys and values the caller holds, nothing cached: an encoder's self-attention,
// or any one-off attention of a chunk. It runs the executors' attend primitive (core/attend.hpp)
// over the caller's matrices (cache/matrix_rows.hpp), so CpuSimd takes the rows of q as query
// blocks (exec/cpu/attend_block.hpp) and Reference is the golden model of it.
//
//   attention(executor, q, k, v, heads, mask, out)
//     q    (n, query_heads * head_dim)      heads adjacent in a row, as Attention takes them
//     k    (n_keys, kv_heads * head_dim)    query head h reads kv head h / (query_heads / kv_heads)
//     v    (n_keys, kv_heads * value_dim)   value_dim = head_dim unless `heads` says otherwise
//     out  (n, query_heads * value_dim)
//   Mask::full: every row sees all n_keys keys. Mask::causal: the rows are the last n of the
//   n_keys positions, and row i sees keys [0, n_keys - n + i] (a chunk after n_keys - n earlier
//   tokens). A key mask narrows that inside the executor's tile loop (core/key_mask.hpp):
//   attention<SlidingWindow<256>>(executor, q, k, v, heads, Mask::causal, out).
// Executors that read a cache of their own on a device (exec::Cuda) do not take it: exec::Cuda has
// Cuda::attention over matrices already on the device, with the same shapes and masks.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "polyattn/cache/matrix_rows.hpp"
#include "polyattn/core/attend.hpp"
#include "polyattn/core/attention_heads.hpp"
#include "polyattn/core/error.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/mask.hpp"
#include "polyattn/core/matrix.hpp"

namespace polyattn {

template <KeyMask KeyMaskT = PrefixMask, class Executor>
void attention(Executor& executor, ConstMatrixRef q, ConstMatrixRef k, ConstMatrixRef v, const AttentionHeads& heads, Mask mask,
               MatrixRef out) {
  const int hq = heads.query_heads, hkv = heads.kv_heads, dh = heads.head_dim;
  const int dv = heads.values();
  heads.check("attention");
  require<ShapeError>(q.cols() == std::ptrdiff_t(hq) * dh, "attention: q has ", q.cols(), " columns, expected ", hq * dh);
  require<ShapeError>(k.cols() == std::ptrdiff_t(hkv) * dh && v.cols() == std::ptrdiff_t(hkv) * dv, "attention: k and v have ",
                      k.cols(), " and ", v.cols(), " columns, expected ", hkv * dh, " and ", hkv * dv);
  require<ShapeError>(k.rows() == v.rows(), "attention: k has ", k.rows(), " rows but v has ", v.rows());
  require<ShapeError>(out.rows() == q.rows() && out.cols() == std::ptrdiff_t(hq) * dv, "attention: out is ", out.rows(), "x",
                      out.cols(), ", expected ", q.rows(), "x", hq * dv);
  const int n = int(q.rows()), n_keys = int(k.rows());
  if (n == 0) return;

  const AttendSpec spec = heads.spec();
  std::vector<QueryJob> jobs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    jobs[std::size_t(i)] = {0, uncached_visible(mask, i, n, n_keys), q.data() + std::ptrdiff_t(i) * q.outerStride(),
                            out.data() + std::ptrdiff_t(i) * out.outerStride()};
  executor.template attend<KeyMaskT>(MatrixRows(k, v, hkv, dh, dv), spec, std::span<const QueryJob>(jobs));
}

}  // namespace polyattn
