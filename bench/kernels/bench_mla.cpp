// Cache bytes per token and decode-step time for the latent variants against MHA/GQA/MQA, in one
// run so ratios are comparable:
//   MTLA-paper shape (8 heads x 64, d_model 512): Mha, Gqa<2>, Mqa, Mla (r = 4 d_h = 256, RoPE
//   d_h / 2 = 32), Mtla with the same latent and s = 2, 3, 4;
//   Whisper-small shape (12 heads x 64, d_model 768): Mha and Whisper-MLA (latent 96 + 48 kept
//   key dims, i.e. 2 frequency pairs per head).
// L = 1500, 4096, 16384 cached tokens, batch 1, 16, 64; CpuSimd with every core. One step is
// `attend` over the whole cache (the per-token cache write is left out, as in bench_decode).
// Also MTLA's causal prefill of T fresh tokens (paper shape) both ways: through Attention, which
// runs it one token at a time so each query sees its slot as decode would, and as the parallel
// form (mtla_parallel.hpp), one uncached attention over a key per token under the stride mask.
// And the causal prefill of T fresh tokens of the shared-row variants both ways (the prefill
// issue asks which is faster): in their own space (Attention::prefill: absorbed queries against
// the cached rows, every head reading one shared row) and expanded to per-head K/V first
// (Mla::expand, or XCache's K = X W_k, V = X W_v, q = x W_q + b_q), then uncached attention;
// the expansion is timed with it. `max_diff`: the two ways' largest output difference.
#include <benchmark/benchmark.h>

#include <random>
#include <type_traits>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/decode_step.hpp"
#include "support/read_bandwidth.hpp"
#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

using MlaPaper = Mla<256, 32, MlaKeyPart::decoupled_rope>;
using WhisperMla = Mla<96, 4, MlaKeyPart::preserved>;
template <int S>
using MtlaPaper = Mtla<256, S, 32>;

using bench::Inputs;
using bench::uniform;

/// args: n_heads (head_dim 64), cached tokens L, batch.
template <class Variant>
void BM_LatentDecode(benchmark::State& state) {
  const AttentionShape shape{int(state.range(0)), 64};
  const int length = int(state.range(1)), batch = int(state.range(2));
  using A = Attention<Variant, Nhd, exec::CpuSimd>;
  std::mt19937 rng(42);
  A attn(shape, {.max_sequences = batch, .capacity = A::cache_rows_for(length), .huge_pages = true}, Inputs<Variant>::params(shape, rng), 0);
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());
  const Inputs<Variant> block(shape, rng);
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, block.rows(n)); });

  const RowMatrixXf q = uniform(batch, Variant::query_width(shape), rng);
  RowMatrixXf out(batch, Variant::output_width(shape));
  bench::time_attend_steps(state, attn, seqs, q, out);
  state.counters["cache_B_per_row"] = double(A::cache_bytes_per_row(shape));
}

/// args: T tokens, prefilled from position 0 (8 heads x 64, Mtla<256, S, 32>).
template <int S, bool Parallel>
void BM_MtlaPrefill(benchmark::State& state) {
  using V = MtlaPaper<S>;
  using A = Attention<V, Nhd, exec::CpuSimd>;
  const AttentionShape shape{8, 64};
  const int tokens = int(state.range(0));
  std::mt19937 rng(42);
  const auto params = Inputs<V>::params(shape, rng);
  const RowMatrixXf q = uniform(tokens, V::query_width(shape), rng), latent = uniform(tokens, V::rank, rng);
  const RowMatrixXf rope = uniform(tokens, V::rope_dim, rng);
  RowMatrixXf out(tokens, V::output_width(shape));
  exec::CpuSimd cpu;
  A attn(shape, {.max_sequences = 1, .capacity = A::cache_rows_for(tokens)}, params, 0);
  for (auto _ : state) {
    if constexpr (Parallel) {
      mtla_parallel_attention<V>(cpu, shape, params, q, {latent, rope}, out);
    } else {
      const int seq = attn.open_sequence();
      attn.prefill(seq, q, {latent, rope}, Mask::causal, out);
      attn.close_sequence(seq);
    }
    benchmark::DoNotOptimize(out.data());
  }
}
/// Times one causal prefill of the T tokens of q and rows: through Attention<V, Nhd, CpuSimd>
/// (own space), or, with `expand`, by `expanded(out)`: the same attention through per-head K/V.
template <class V, class Expanded>
void time_shared_row_prefill(benchmark::State& state, AttentionShape shape, bool expand, const RowMatrixXf& q,
                             const typename V::Params& params, const typename V::Rows& rows, Expanded&& expanded) {
  using A = Attention<V, Nhd, exec::CpuSimd>;
  const int tokens = int(q.rows());
  A attn(shape, {.max_sequences = 1, .capacity = A::cache_rows_for(tokens)}, params, 0);
  RowMatrixXf own(tokens, V::output_width(shape)), out(tokens, V::output_width(shape));
  const auto own_space = [&](RowMatrixXf& o) {
    const int seq = attn.open_sequence();
    attn.prefill(seq, q, rows, Mask::causal, o);
    attn.close_sequence(seq);
  };
  own_space(own);
  expanded(out);
  state.counters["max_diff"] = double((own - out).cwiseAbs().maxCoeff());
  for (auto _ : state) {
    if (expand)
      expanded(out);
    else
      own_space(out);
    benchmark::DoNotOptimize(out.data());
  }
}

/// args: T tokens, expand (0: own space, 1: per-head K/V). Mla at the paper's shape (8 heads of
/// 64, r 256, RoPE 32) and Whisper-MLA at Whisper small's (12 heads, r 96, 4 kept key dims a head).
template <class V>
void BM_MlaPrefill(benchmark::State& state) {
  const AttentionShape shape{std::is_same_v<V, WhisperMla> ? 12 : 8, 64};
  const int tokens = int(state.range(0));
  std::mt19937 rng(42);
  const auto params = Inputs<V>::params(shape, rng);
  const RowMatrixXf q = uniform(tokens, V::query_width(shape), rng), latent = uniform(tokens, V::rank, rng);
  const RowMatrixXf part = uniform(tokens, V::key_part_width(shape), rng);
  const typename V::Rows rows{latent, part};
  const AttendSpec spec = V::attend_spec(shape, params);
  const AttentionHeads heads{shape.n_heads, shape.n_heads, V::query_head_dim(shape), spec.scale, shape.head_dim};
  exec::CpuSimd cpu;
  time_shared_row_prefill<V>(state, shape, state.range(1) != 0, q, params, rows, [&](RowMatrixXf& out) {
    const auto kv = V::expand(shape, params, rows);
    attention(cpu, q, kv.k, kv.v, heads, Mask::causal, out);
  });
}

/// args: T tokens, expand. XCache at Whisper tiny's shape (6 heads of 64, d 384).
void BM_XCachePrefill(benchmark::State& state) {
  const AttentionShape shape{6, 64};
  const int tokens = int(state.range(0));
  std::mt19937 rng(42);
  const XCache::Params params = Inputs<XCache>::params(shape, rng);
  if (params.path != XCache::QueryPath::projected) {
    state.SkipWithError("expects the projected query path at this shape");
    return;
  }
  const RowMatrixXf x = uniform(tokens, shape.input_width(), rng);
  const AttendSpec spec = XCache::attend_spec(shape, params);
  const AttentionHeads heads{shape.n_heads, shape.n_heads, shape.head_dim, spec.scale};
  exec::CpuSimd cpu;
  time_shared_row_prefill<XCache>(state, shape, state.range(1) != 0, x, params, {x}, [&](RowMatrixXf& out) {
    const RowMatrixXf q = (x * params.w_q).rowwise() + params.b_q, k = x * params.w_k, v = x * params.w_v;
    attention(cpu, q, k, v, heads, Mask::causal, out);
    out.rowwise() += params.b_v;
  });
}
void SharedRowPrefillArgs(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{448, 1500, 4096}, {0, 1}})->ArgNames({"T", "expand"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

void PrefillLengths(benchmark::internal::Benchmark* b) {
  b->Arg(448)->Arg(1500)->ArgName("T")->UseRealTime()->Unit(benchmark::kMillisecond);
}

void Shapes(benchmark::internal::Benchmark* b, int heads) {
  for (int length : {1500, 4096, 16384})
    for (int batch : {1, 16, 64}) b->Args({heads, length, batch});
  b->ArgNames({"heads", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
}
void PaperShape(benchmark::internal::Benchmark* b) { Shapes(b, 8); }
void WhisperSmallShape(benchmark::internal::Benchmark* b) { Shapes(b, 12); }


}  // namespace

using polyattn::bench::BM_ReadBandwidth;
BENCHMARK(BM_ReadBandwidth)->Iterations(1);
BENCHMARK(BM_LatentDecode<polyattn::Mha>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Gqa<2>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Mqa>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MlaPaper>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<2>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<3>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<MtlaPaper<4>>)->Apply(PaperShape);
BENCHMARK(BM_LatentDecode<polyattn::Mha>)->Apply(WhisperSmallShape);
BENCHMARK(BM_LatentDecode<WhisperMla>)->Apply(WhisperSmallShape);
BENCHMARK(BM_MtlaPrefill<2, false>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<2, true>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<4, false>)->Apply(PrefillLengths);
BENCHMARK(BM_MtlaPrefill<4, true>)->Apply(PrefillLengths);
BENCHMARK(BM_MlaPrefill<MlaPaper>)->Apply(SharedRowPrefillArgs);
BENCHMARK(BM_MlaPrefill<WhisperMla>)->Apply(SharedRowPrefillArgs);
BENCHMARK(BM_XCachePrefill)->Apply(SharedRowPrefillArgs);

BENCHMARK_MAIN();
