// One decode-attention benchmark: `batch` sequences of `length` cached tokens, each step one
// query per sequence over its whole cache. The step reads batch * length * bytes-per-token of
// cache, which is what bounds decoding; the counters relate it to the measured read bandwidth.
#pragma once

#include <cstddef>
#include <algorithm>
#include <vector>

#include <benchmark/benchmark.h>

#include <polyattn/attention.hpp>

#include "support/read_bandwidth.hpp"
#include "support/variant_inputs.hpp"

namespace polyattn::bench {

/// Reports cache bytes per token, bytes read per step, achieved GB/s and the fraction of the
/// read bandwidth measured in this run. Call after the timing loop.
inline void report_bandwidth(benchmark::State& state, std::size_t bytes_per_token, std::size_t bytes_per_step) {
  using benchmark::Counter;
  state.counters["cache_B_per_token"] = double(bytes_per_token);
  state.counters["MB_per_step"] = double(bytes_per_step) * 1e-6;
  state.counters["GB_per_s"] = Counter(double(bytes_per_step) * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["of_read_bw"] = Counter(double(bytes_per_step) / read_bandwidth(), Counter::kIsIterationInvariantRate);
}

/// Times decode steps of `attn` (one query per sequence over everything it has cached), after
/// one untimed step. Google Benchmark 1.7 has no warm-up, and a case whose step outlasts min_time
/// is timed on one step: without it, the first step after the cache was filled. That step took
/// 1.3-1.7x as long as the steps after it (Intel Xeon, L 65536, batch 16, MHA f32: Hnd 191
/// against 142 ms, Paged<16> 265-310 against 170-200). perf of such a run shows the same kernels
/// and no kernel time but the fill's page clearing; the cause is not known. A decode step in use
/// follows the step before it, over the same cache, so that is the step timed here.
template <class A>
void time_steps(benchmark::State& state, A& attn, const std::vector<int>& seqs, ConstMatrixRef q, MatrixRef out) {
  attn.attend(seqs, q, out);
  for (auto _ : state) {
    attn.attend(seqs, q, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

/// Times decode steps (time_steps) and reports the counters above; bytes read per step are the
/// cache rows the sequences hold.
template <class A>
void time_attend_steps(benchmark::State& state, A& attn, const std::vector<int>& seqs, ConstMatrixRef q, MatrixRef out) {
  read_bandwidth();  // measured before timing starts
  time_steps(state, attn, seqs, q, out);
  std::size_t step_bytes = 0;
  for (int seq : seqs) step_bytes += attn.cache_bytes_used(seq);
  report_bandwidth(state, A::cache_bytes_per_token(attn.shape()), step_bytes);
  state.SetLabel(A::name());
}

/// The roofline itself, as its own row of a report (register with BENCHMARK(BM_ReadBandwidth)).
inline void BM_ReadBandwidth(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(read_bandwidth());
  state.counters["GB_per_s"] = read_bandwidth() * 1e-9;
}

}  // namespace polyattn::bench
