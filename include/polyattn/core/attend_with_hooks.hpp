// The attend step shared by every owner of a cache: a variant's query hook, the executor over the
// store (or over the rows the variant derives from it), the variant's output hook. Attention
// (attention.hpp) calls it for its own cache; a module whose cache is read by several layers with
// different weights (layers/cross_cache.hpp: one encoder-output cache for every decoder layer)
// calls it directly. It names no layout and no executor: both are template arguments.
#pragma once

#include <cstddef>
#include <span>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/key_mask.hpp"
#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

/// Scratch of one attend step: transformed queries, attended rows before finish_outputs, and the
/// variant's own scratch for rows it derives at attend time.
template <class Variant>
struct AttendScratch {
  RowMatrixXf queries, attended;
  typename Variant::Scratch derived;
};

/// The attend step: maps q through the variant's query hook, runs the executor for `jobs` over
/// `store` (or over the views the variant derives from it), maps the result through the output
/// hook into `out`. jobs[i] answers q.row(i) and writes out.row(i); its query/out pointers are
/// filled here. Attention calls it for its own cache; a cache read by several layers with
/// different weights (one encoder-output cache for every decoder layer) calls it directly. `KeyMaskT`
/// is the key mask the executor applies inside its tile loop (core/key_mask.hpp).
template <class Variant, KeyMask KeyMaskT = PrefixMask, class Store, class Executor>
void attend_with_hooks(const AttentionShape& shape, const typename Variant::Params& params, const AttendSpec& spec,
                       const Store& store, Executor& executor, std::span<QueryJob> jobs, ConstMatrixRef q, MatrixRef out,
                       AttendScratch<Variant>& scratch) {
  // An empty batch or a prefill of no tokens: nothing to do. (Going on, the hooks would take
  // column blocks of matrices with no rows, whose null data pointer Eigen then offsets: UB.)
  if (jobs.empty()) return;
  const float* q_data = q.data();
  std::ptrdiff_t q_stride = q.outerStride();
  if constexpr (Variant::transforms_queries) {
    Variant::prepare_queries(shape, params, q, scratch.queries);
    q_data = scratch.queries.data();
    q_stride = scratch.queries.cols();
  }
  float* out_data = out.data();
  std::ptrdiff_t out_stride = out.outerStride();
  if constexpr (Variant::transforms_outputs) {
    scratch.attended.resize(std::ptrdiff_t(jobs.size()), std::ptrdiff_t(spec.query_heads()) * spec.value_dim);
    out_data = scratch.attended.data();
    out_stride = scratch.attended.cols();
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].query = q_data + std::ptrdiff_t(i) * q_stride;
    jobs[i].out = out_data + std::ptrdiff_t(i) * out_stride;
  }
  const std::span<const QueryJob> all(jobs.data(), jobs.size());
  if constexpr (Variant::derives_rows) {
    // Derived rows (slim option 1's V = K W_kv, keys rotated after reading for RoPE) are computed
    // on the host from every visible token at every attend, as dense matrices the executor reads
    // through DerivedRows. An executor that reads a device copy of the cache would have to upload
    // all of them at every step (as many bytes as the attend reads): not supported.
    static_assert(!requires { Executor::mirrors_cache_rows; },
                  "polyattn: variants that derive rows at attend time (derives_rows: SlimK<slim::ValuesFromKeys, ...> = "
                  "SlimK1, and SlimK<..., slim::Rope>) are not supported by executors that mirror the cache on a "
                  "device (exec::Cuda): use SlimK2 (SlimK<slim::WeightedKeys, slim::NoRope>) or a CPU executor");
    Variant::attend_derived(shape, params, store, all, scratch.derived,
                            [&](const auto& view, std::span<const QueryJob> some) { executor.template attend<KeyMaskT>(view, spec, some); });
  } else {
    executor.template attend<KeyMaskT>(store, spec, all);
  }
  if constexpr (Variant::transforms_outputs) Variant::finish_outputs(shape, params, scratch.attended, out);
}

}  // namespace polyattn
