// Prefill: L query rows over L keys, causal or full, heads of 64, every core (2 here), against
// the FMA-throughput probe of the same run (support/roofline.hpp), since prefill is compute
// bound. Four ways:
//   EigenGemmSoftmax  per head, scores = Q K^T as one Eigen GEMM (L x L), a row-by-row softmax,
//                     then scores V as a second GEMM: the scheme the Whisper encoder used
//                     before it called the library (Eigen's OpenMP threads for the GEMMs).
//   OnednnGemmSoftmax the same scheme with oneDNN's dnnl_sgemm (Debian libdnnl-dev, OpenMP
//                     threads) for both products: the best GEMM at hand, so the scheme at its best.
//   Uncached          polyattn::attention(executor, q, k, v, heads, mask, out) on CpuSimd: query
//                     blocks against key tiles (exec/cpu/attend_block.hpp).
//   CachedPrefill     Attention<Mha, Nhd, CpuSimd>::prefill: the same kernel, plus writing the
//                     rows into the cache.
// args: L, heads, mask (0 causal, 1 full). Multiply-adds counted: 2 * dh per (query head, visible
// key). No time is asserted.
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <cmath>
#include <random>
#include <stdexcept>

#include <dnnl.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <polyattn/polyattn.hpp>

#include "support/roofline.hpp"
#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

constexpr int kHeadDim = 64;
constexpr int kThreads = 2;

struct Problem {
  int length, heads;
  Mask mask;
  RowMatrixXf q, k, v;
  explicit Problem(const benchmark::State& state)
      : length(int(state.range(0))), heads(int(state.range(1))), mask(state.range(2) ? Mask::full : Mask::causal) {
    std::mt19937 rng(7);
    q = bench::uniform(length, heads * kHeadDim, rng);
    k = bench::uniform(length, heads * kHeadDim, rng);
    v = bench::uniform(length, heads * kHeadDim, rng);
  }
  double macs() const {
    const double pairs = mask == Mask::full ? double(length) * length : double(length) * (length + 1) / 2;
    return pairs * heads * 2 * kHeadDim;
  }
};

void report(benchmark::State& state, const Problem& p) {
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(2 * p.macs() * double(state.iterations()), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["of_fma_probe"] =
      benchmark::Counter(p.macs() * double(state.iterations()) / bench::fma_throughput(), benchmark::Counter::kIsRate);
}

/// The scheme's softmax: row by row, on one thread, as the encoder ran it.
void softmax_rows(RowMatrixXf& scores, Mask mask) {
  const Eigen::Index n = scores.rows();
  for (Eigen::Index i = 0; i < n; ++i) {
    auto row = scores.row(i);
    if (mask == Mask::causal) row.tail(n - 1 - i).setConstant(-INFINITY);
    row = (row.array() - row.maxCoeff()).exp().matrix();
    row /= row.sum();
  }
}

void BM_EigenGemmSoftmax(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const Problem p(state);
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  RowMatrixXf out(p.length, p.heads * kHeadDim), scores(p.length, p.length);
  for (auto _ : state) {
    const RowMatrixXf q = p.q * scale;
    for (int h = 0; h < p.heads; ++h) {
      scores.noalias() = q.middleCols(h * kHeadDim, kHeadDim) * p.k.middleCols(h * kHeadDim, kHeadDim).transpose();
      softmax_rows(scores, p.mask);
      out.middleCols(h * kHeadDim, kHeadDim).noalias() = scores * p.v.middleCols(h * kHeadDim, kHeadDim);
    }
    benchmark::DoNotOptimize(out.data());
  }
  report(state, p);
}

/// C (m x n, row stride ldc) = alpha A B^T (transb 'T') or alpha A B ('N'), row-major, by dnnl_sgemm.
void sgemm(char transb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  if (dnnl_sgemm('N', transb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc) != dnnl_success)
    throw std::runtime_error("dnnl_sgemm failed");
}

void BM_OnednnGemmSoftmax(benchmark::State& state) {
#if defined(_OPENMP)
  omp_set_num_threads(kThreads);
#endif
  const Problem p(state);
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  const int width = p.heads * kHeadDim;
  RowMatrixXf out(p.length, width), scores(p.length, p.length);
  for (auto _ : state) {
    for (int h = 0; h < p.heads; ++h) {
      const int col = h * kHeadDim;
      sgemm('T', p.length, p.length, kHeadDim, scale, p.q.data() + col, width, p.k.data() + col, width, scores.data(), p.length);
      softmax_rows(scores, p.mask);
      sgemm('N', p.length, kHeadDim, p.length, 1.0f, scores.data(), p.length, p.v.data() + col, width, out.data() + col, width);
    }
    benchmark::DoNotOptimize(out.data());
  }
  report(state, p);
}

void BM_Uncached(benchmark::State& state) {
  const Problem p(state);
  exec::CpuSimd cpu(kThreads);
  RowMatrixXf out(p.length, p.heads * kHeadDim);
  for (auto _ : state) {
    attention(cpu, p.q, p.k, p.v, {p.heads, p.heads, kHeadDim}, p.mask, out);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, p);
}

void BM_CachedPrefill(benchmark::State& state) {
  const Problem p(state);
  Attention<Mha, Nhd, exec::CpuSimd> attn({p.heads, kHeadDim}, {.max_sequences = 1, .capacity = p.length}, {}, kThreads);
  RowMatrixXf out(p.length, p.heads * kHeadDim);
  for (auto _ : state) {
    const int seq = attn.open_sequence();
    attn.prefill(seq, p.q, {p.k, p.v}, p.mask, out);
    attn.close_sequence(seq);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, p);
}

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"L", "heads", "full"})->Unit(benchmark::kMillisecond)->UseRealTime();
  for (int mask : {1, 0})
    for (int heads : {6, 8})
      for (int length : {448, 1500, 4096}) b->Args({length, heads, mask});
}

BENCHMARK(BM_EigenGemmSoftmax)->Apply(Args);
BENCHMARK(BM_OnednnGemmSoftmax)->Apply(Args);
BENCHMARK(BM_Uncached)->Apply(Args);
BENCHMARK(BM_CachedPrefill)->Apply(Args);

}  // namespace

int main(int argc, char** argv) { return polyattn::bench::run_roofline_benchmarks(argc, argv); }
