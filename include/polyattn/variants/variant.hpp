// What a variant is. A variant describes *what is cached per token* and how attention over that
// cache is formed; it never names a layout or an executor (see core/attend.hpp for the
// primitive every variant reduces to).
//
// A variant V provides:
//   V::name()                                   short name ("mha", "gqa2", ...)
//   V::Params                                   weights or options it needs (empty for MHA)
//   V::Rows                                     what append() writes: one row per token
//   V::validate(shape, params)                  throws ShapeError for an unusable shape
//   V::cache_tensors(shape, params)             the cached tensors' per-token shapes
//   V::cache_elements_per_token(shape)          constexpr, for capacity planning
//   V::tokens_per_row                           tokens sharing one cache row (1 unless the variant
//                                               merges tokens over time, see VariantBase)
//   V::attend_spec(shape, params)               keys/values/group/scale for the executor
//   V::query_width(shape), V::output_width(shape)  columns of q and of the output
//   V::row_count(rows), V::check_rows(shape, params, rows)
//   V::write_rows(store, seq, pos, shape, params, rows, first_row, n)
//                                            // (+ double* open_row when V::open_row_width > 0)
//                                               pos = token position of rows[first_row]
// and, when `transforms_queries` / `transforms_outputs` is true,
//   V::prepare_queries(shape, params, q, RowMatrixXf& attend_queries)
//   V::finish_outputs(shape, params, const RowMatrixXf& attended, MatrixRef out)
// and, when `derives_rows` is true (rows the executor reads are computed from the cache at attend
// time: values from keys, keys rotated after reading), a default-constructible `V::Scratch` and
//   V::attend_derived(shape, params, const Store& store, std::span<const QueryJob> jobs,
//                     V::Scratch&, attend)
// which calls attend(view, some_jobs) for groups of the jobs, `view` being any object with the
// store interface the executors read (`row`, `run`; see variants/derived_rows.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <string>

#include "polyattn/core/attend.hpp"
#include "polyattn/core/shape.hpp"

namespace polyattn {

/// Defaults for the optional hooks: queries and outputs pass through untouched, one cache row
/// per token.
struct VariantBase {
  static constexpr bool transforms_queries = false;
  static constexpr bool transforms_outputs = false;
  static constexpr bool derives_rows = false;
  struct Scratch {};
  /// Tokens that share one cache row. A variant that merges tokens over time (Mtla with stride
  /// s) sets it to s; row k then holds tokens [k * s, (k + 1) * s) and `Attention` keeps:
  ///  - store lengths and CacheConfig::capacity in cache rows, Attention::length in tokens;
  ///  - write_rows' `pos` as the token position (equal to the row when this is 1); the variant
  ///    maps tokens to rows itself, accumulating into a row that is not yet full;
  ///  - causal prefill as one token at a time, so each query sees the cache as it was right after
  ///    its own token was written: exactly what incremental decode sees.
  static constexpr int tokens_per_row = 1;
  /// Doubles per sequence that `Attention` keeps for a variant that merges tokens: the unrounded
  /// sum of the row being filled, passed to write_rows (Mtla: its Rank latent values), so that a
  /// 16-bit row is rounded once from the exact sum rather than again at every merge.
  static constexpr int open_row_width = 0;
};

/// Elements of one cache row: V::cache_elements_per_row(shape) where the variant merges tokens
/// (then cache_elements_per_token is an average), else cache_elements_per_token(shape).
template <class V>
constexpr std::size_t cache_elements_per_row(AttentionShape shape) {
  if constexpr (requires { V::cache_elements_per_row(shape); })
    return V::cache_elements_per_row(shape);
  else
    return V::cache_elements_per_token(shape);
}

template <class V>
concept AttentionVariant = requires(AttentionShape shape, const typename V::Params& params, const typename V::Rows& rows) {
  { V::name() } -> std::convertible_to<std::string>;
  { V::cache_elements_per_token(shape) } -> std::convertible_to<std::size_t>;
  { V::attend_spec(shape, params) } -> std::same_as<AttendSpec>;
  { V::query_width(shape) } -> std::convertible_to<int>;
  { V::output_width(shape) } -> std::convertible_to<int>;
  { V::row_count(rows) } -> std::convertible_to<int>;
  V::validate(shape, params);
  V::check_rows(shape, params, rows);
  V::cache_tensors(shape, params);
  { V::transforms_queries } -> std::convertible_to<bool>;
  { V::transforms_outputs } -> std::convertible_to<bool>;
  { V::derives_rows } -> std::convertible_to<bool>;
  { V::tokens_per_row } -> std::convertible_to<int>;
};

}  // namespace polyattn
