// MTLA's parallel form (variants/mtla.hpp) on an executor: causal self-attention of T tokens at
// positions 0..T-1, all at once, as the paper trains it, with nothing cached.
//
//   mtla_parallel_attention<Mtla<R, S, P>>(executor, shape, params, q, {latent, rope_key}, out)
//     q    (T, V::query_width(shape))
//     rows (T, R) latents and (T, P) RoPE keys, as Attention<Mtla...>::prefill takes them
//     out  (T, V::output_width(shape))
//
// Each token is a key: [its slot as merged up to it | its RoPE key] (Mtla::parallel_keys), read by
// the absorbed queries as one shared head (MQA-like, G = n_heads), with the values the latent
// part of the same rows. The stride-aware causal mask (Mtla::StrideMask) is a key mask, so the
// executor's tile loop applies it (core/key_mask.hpp): CpuSimd runs the query-block kernel.
// Row m equals, up to the order of the sums, what Attention<Mtla...> returns for token m decoded
// after the tokens before it: the keys are the same floats, rounded once from the same double
// sums. A dispatched CPU executor (exec/cpu/dispatch_cpu_simd.hpp) needs its kernels for the pair
// POLYATTN_CPU_KERNELS_FOR(Arch, V::StrideMask, MatrixRows).
#pragma once

#include "polyattn/core/matrix.hpp"
#include "polyattn/core/shape.hpp"
#include "polyattn/uncached_attention.hpp"

namespace polyattn {

template <class V, class Executor>
void mtla_parallel_attention(Executor& executor, AttentionShape s, const typename V::Params& p, ConstMatrixRef q,
                             const typename V::Rows& r, MatrixRef out) {
  const RowMatrixXf keys = V::parallel_keys(s, p, r);  // validates s, p and r
  const auto T = keys.rows();
  require<ShapeError>(q.rows() == T && q.cols() == V::query_width(s), V::name(), ": q is (", q.rows(), ", ", q.cols(),
                      "), expected (", T, ", ", V::query_width(s), ")");
  require<ShapeError>(out.rows() == T && out.cols() == V::output_width(s), V::name(), ": out is (", out.rows(), ", ",
                      out.cols(), "), expected (", T, ", ", V::output_width(s), ")");
  RowMatrixXf absorbed, attended(T, std::ptrdiff_t(s.n_heads) * V::rank);
  V::prepare_queries(s, p, q, absorbed);  // (T, n_heads * (Rank + RopeDim))
  const AttendSpec spec = V::attend_spec(s, p);
  attention<typename V::StrideMask>(executor, absorbed, keys, keys.leftCols(V::rank),
                                    {s.n_heads, 1, spec.key_dim, spec.scale, spec.value_dim}, Mask::causal, attended);
  V::finish_outputs(s, p, attended, out);
}

}  // namespace polyattn
