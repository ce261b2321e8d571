// One decode step of Attention<V, Layout, Executor, T> as a Google Benchmark case: one query per
// sequence over L cached tokens, args {L, batch}, with the bytes it reads and the multiply-adds
// it does against the run's two roofs (roofline.hpp). bench_decode_variants and
// bench_decode_dispatch run it.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include <polyattn/polyattn.hpp>

#include "support/decode_step.hpp"
#include "support/filled_decode.hpp"
#include "support/huge_page_share.hpp"
#include "support/roofline.hpp"

namespace polyattn::bench {

inline constexpr double kMaxCacheBytes = 16.0 * (1ull << 30);

/// args: context length L, batch.
template <class V, class Layout, class T, class Executor = exec::CpuSimd>
void BM_DecodeVariant(benchmark::State& state) {
  using Case = FilledDecode<V, Layout, T, Executor>;
  using A = typename Case::A;
  constexpr AttentionShape shape = Case::shape;
  const int length = int(state.range(0)), batch = int(state.range(1));
  if (double(A::cache_bytes_per_token(shape)) * length * batch > kMaxCacheBytes) {
    state.SkipWithError("cache over 16 GiB: skipped");
    return;
  }
  const double huge_bytes_before = anon_huge_page_bytes();
  Case filled(length, batch);
  const double huge_bytes_after = anon_huge_page_bytes();
  A& attn = *filled.attn;
  const std::vector<int>& seqs = filled.seqs;
  const RowMatrixXf& q = filled.q;
  RowMatrixXf& out = filled.out;
  // This case's roofs: the better of two probes each, just before and just after its timing. On
  // a VM both move within minutes (ReadProbe): an AMD EPYC Zen 5 VM's 2 threads switched between
  // about 45 and 80 GB/s, and the int8 cases, bound by arithmetic, ran 1.3x slower while the
  // read probe was high, as if a neighbour then computed on the same cores.
  const double read_before = read_probe().measure(), fma_before = measure_fma_throughput();
  time_steps(state, attn, seqs, q, out);
  const double read_bw = std::max(read_before, read_probe().measure());
  const double fma_rate = std::max(fma_before, measure_fma_throughput());
  // Bytes: the cache rows the step reads. Multiply-adds: every query head scores each token
  // (key_dim) and accumulates its value row (value_dim); the variants' query and output maps
  // (a few per step, not per token) are left out.
  const AttendSpec spec = V::attend_spec(shape, attn.params());
  double bytes = 0, macs = 0;
  for (int seq : seqs) {
    bytes += double(attn.cache_bytes_used(seq));
    macs += double(attn.length(seq)) * spec.query_heads() * (spec.key_dim + spec.value_dim);
  }
  state.counters["cache_B_per_token"] = double(A::cache_bytes_per_token(shape));
  // The share of the filled cache on 2 MiB pages (huge_page_share.hpp); -1: not known here.
  const double cache_bytes = double(A::cache_bytes_per_token(shape)) * length * batch;
  state.counters["huge_page_share"] =
      huge_bytes_before < 0 ? -1.0 : std::min(1.0, (huge_bytes_after - huge_bytes_before) / cache_bytes);
  state.counters["read_probe_GB_per_s"] = read_bw * 1e-9;
  state.counters["fma_probe_GFMA_per_s"] = fma_rate * 1e-9;
  report_roofline(state, bytes, macs, read_bw, fma_rate);
  if constexpr (requires { attn.executor().kernels(); })
    state.SetLabel(A::name() + " ran " + attn.executor().kernels());  // an executor that chooses when it runs
  else
    state.SetLabel(A::name());
}

inline void DecodeShapes(benchmark::internal::Benchmark* b) {
  for (int length : {1500, 4096, 16384, 65536})
    for (int batch : {1, 16, 64}) b->Args({length, batch});
  b->ArgNames({"L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}

}  // namespace polyattn::bench
