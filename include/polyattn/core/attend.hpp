// The contract between variants and executors. Every variant reduces decode and prefill to
// one primitive: for each query row, G query heads per cache head take a softmax over the
// cached key rows (up to `visible` tokens) and accumulate the matching value rows.
//   MHA/GQA/MQA: keys = tensor 0 (K), values = tensor 1 (V), G = n_heads / kv_heads.
//   K-only (slim):  keys = values = tensor 0, one cache head holding the whole key row (all heads);
//                   query head g scores against its own slice (key_group_stride = head_dim) and
//                   accumulates the whole row; the variant maps the result through W_KV after.
//   X-cache / MLA:  one shared cache head (G = n_heads) whose row holds x (or latent|rope key);
//                   the variant transforms queries before and outputs after.
// Executors implement `attend(store, spec, jobs)` once; new variants only describe a spec.
//
// Scores at the limits, the same on every executor. A score is s_t = scale * q . k_t in the
// executor's accumulation type (double for Reference, float for CpuSimd and Cuda):
//   - s_t = -inf gives token t weight 0 (a mask). A query that sees no token (visible == 0), or
//     whose every score is -inf, outputs 0. A block of tokens whose scores are all -inf adds
//     nothing (it never forms exp(-inf - -inf) = NaN), wherever it falls in the sequence.
//   - s_t = +inf (q . k beyond the accumulation type's range) counts as that type's largest finite
//     value: the tokens at +inf share the weight equally (bounded_score, core/online_softmax.hpp).
//   - Finite scores, however large or far apart, give finite weights: exp only ever sees
//     s_t - max <= 0.
//   - NaN in a query or a visible key gives NaN (a read of NaN-poisoned capacity shows).
// So where float overflows and double does not (|q . k| > 3.4e38), an fp32 executor and the
// Reference executor agree whenever one token's score dominates (or several tie), and a query
// whose every score overflows to -inf in float outputs 0 there.
#pragma once

#include <cstddef>
#include <span>

#include "polyattn/core/row_scales.hpp"

namespace polyattn {

struct AttendSpec {
  int cache_heads = 0;    ///< heads of the key/value tensors (KV heads)
  int group = 1;          ///< query heads per cache head
  int key_dim = 0;        ///< elements of a key row used for scores
  int value_dim = 0;      ///< elements of a value row accumulated
  int key_tensor = 0;     ///< cached tensor holding keys, and the column where they start
  int key_offset = 0;
  int key_group_stride = 0;  ///< query head g of a group reads its key at key_offset + g * key_group_stride
                             ///< (0: the group shares one key, as in GQA; head_dim: heads packed in one row)
  int value_tensor = 1;   ///< cached tensor holding values, and the column where they start
  int value_offset = 0;
  float scale = 1.0f;     ///< softmax scale applied to q.k
  RowScales key_scales{};    ///< int8 caches: where a key row's scales are (Attention sets both from the
  RowScales value_scales{};  ///< variant's cache tensors; codes == 0 for the other element types)
  bool rewrites_last_row = false;  ///< the variant may rewrite a sequence's last cached row after an attend
                                   ///< read it (Mtla merges later tokens into it); an executor that keeps a
                                   ///< copy of the cache (exec::Cuda) must re-copy that row. Attention sets it
                                   ///< from Variant::tokens_per_row > 1.

  int query_heads() const { return cache_heads * group; }
};

/// One query row: `query` is (cache_heads * group, key_dim) row-major, query head
/// h * group + g reading cache head h; `out` is (cache_heads * group, value_dim).
/// It attends to tokens [0, visible) of sequence `seq`, or the part of them that the executor's
/// key mask leaves it (core/key_mask.hpp: a sliding window, MTLA's stride mask).
struct QueryJob {
  int seq = 0;
  int visible = 0;
  const float* query = nullptr;
  float* out = nullptr;
};

/// Calls f(first, count) for each run of consecutive jobs on the same sequence (a prefill chunk
/// is one run; a decode batch is one run per sequence).
template <class Jobs, class F>
void for_each_sequence_run(const Jobs& jobs, F&& f) {
  std::size_t first = 0;
  while (first < jobs.size()) {
    std::size_t end = first + 1;
    while (end < jobs.size() && jobs[end].seq == jobs[first].seq) ++end;
    f(first, end - first);
    first = end;
  }
}

}  // namespace polyattn
