// Prefill attention on the GPU (exec::Cuda): n query rows of one sequence over its n cached
// tokens, causal or full, MHA at 6 x 64 (Whisper tiny/base) and 8 x 64, n = 448, 1500, 4096,
// (and 8 x 128 at 1500), through the attend primitive on an Nhd store with fp32 rows. Four kernel
// choices, and the prefill kernel's split of the tokens (BM_CudaPrefillSplit: none, or to 2-16
// blocks a SM):
//   automatic       the register-tiled prefill kernel over query blocks of 64 (prefill_tiles.cuh)
//   simple_prefill  the simple prefill kernel over query blocks of 32 (prefill_blocks.cuh)
//   decode          every row a job of the decode kernels (the tiled one here), as before them
//   general    every row a job of the general decode kernel
// and, as a peer, the scheme the Whisper example's CUDA encoder used before (BM_CublasScheme):
// per head an (n x n) score matrix from one strided-batched cuBLAS sgemm (fp32, no TF32), a
// row-softmax kernel, and a second sgemm for the outputs (full mask only). Cuda::attention over
// the same device matrices is BM_CudaAttention (q, k, v side by side in one buffer, as there), on
// either prefill kernel.
// Counters: kernel_ms (GPU time of the attention kernels per call, no copies); GFLOP_per_s, the
// flops a dense computation needs (2 * dim for a score and 2 * dim for its value row, per
// (row, visible token) pair and head: 4 * pairs * dim * heads, pairs = n^2 full, n (n + 1) / 2
// causal) over kernel_ms; vs_automatic, kernel time over the prefill kernel's at the same shape
// (which runs first). Wall time adds the queries' upload and the outputs' download.
#include <benchmark/benchmark.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <polyattn/cache/contiguous.hpp>
#include <polyattn/core/attention_heads.hpp>
#include <polyattn/exec/cuda/cuda.cuh>

namespace {

using namespace polyattn;
using Kernel = exec::Cuda::Kernel;

std::map<std::array<long, 4>, double>& automatic_seconds() {
  static std::map<std::array<long, 4>, double> seconds;
  return seconds;
}

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::automatic: return "tiled prefill kernel";
    case Kernel::simple_prefill: return "simple prefill kernel";
    case Kernel::decode: return "decode kernels, a job per row";
    default: return "general kernel, a job per row";
  }
}

/// args: heads, dim, n, causal (1) or full (0), and for the prefill kernel the split's blocks per
/// SM (exec::Cuda::set_prefill_blocks_per_sm; -1: the default).
template <Kernel kKernel>
void BM_CudaPrefill(benchmark::State& state) {
  std::string reason;
  if (exec::cuda::device_count(&reason) == 0) {
    state.SkipWithError(("no CUDA device: skipping (" + reason + ")").c_str());
    return;
  }
  const int heads = int(state.range(0)), dim = int(state.range(1)), n = int(state.range(2));
  const bool causal = state.range(3) != 0;
  const std::vector<TensorSpec> tensors{{heads, dim}, {heads, dim}};
  CacheStore<Nhd, float> store(tensors, {.max_sequences = 1, .capacity = n});
  const int seq = store.open();
  store.grow(seq, n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int t = 0; t < 2; ++t)
    for (int token = 0; token < n; ++token)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < dim; ++i) store.row(t, seq, token, h)[i] = dist(rng);
  AttendSpec spec;
  spec.cache_heads = heads;
  spec.key_dim = spec.value_dim = dim;
  spec.key_tensor = 0;
  spec.value_tensor = 1;
  spec.scale = 1.0f / std::sqrt(float(dim));
  const std::size_t row = std::size_t(heads) * std::size_t(dim);
  std::vector<float> q(std::size_t(n) * row), out(std::size_t(n) * row);
  for (float& x : q) x = dist(rng);
  std::vector<QueryJob> jobs;
  for (int i = 0; i < n; ++i) jobs.push_back({seq, causal ? i + 1 : n, q.data() + std::size_t(i) * row, out.data() + std::size_t(i) * row});

  exec::Cuda cuda;
  cuda.set_kernel(kKernel);
  const int split = state.range(4) >= 0 ? int(state.range(4)) : -1;
  if (split >= 0) cuda.set_prefill_blocks_per_sm(split);
  cuda.attend(std::as_const(store), spec, std::span<const QueryJob>(jobs));  // the first call copies the cache up
  double kernel_seconds = 0;
  for (auto _ : state) {
    cuda.attend(std::as_const(store), spec, std::span<const QueryJob>(jobs));
    kernel_seconds += cuda.last_kernel_seconds();
    benchmark::DoNotOptimize(out.data());
  }
  const double calls = double(state.iterations());
  const double pairs = causal ? double(n) * (n + 1) / 2 : double(n) * n;
  const double per_call = calls > 0 ? kernel_seconds / calls : 0.0;
  state.counters["kernel_ms"] = per_call * 1e3;
  state.counters["GFLOP_per_s"] = per_call > 0 ? 4.0 * pairs * dim * heads / per_call * 1e-9 : 0.0;
  const std::array<long, 4> key{long(heads), long(dim), long(n), long(causal)};
  if (kKernel == Kernel::automatic && split < 0)
    automatic_seconds()[key] = per_call;
  else if (const auto a = automatic_seconds().find(key); a != automatic_seconds().end() && a->second > 0)
    state.counters["vs_automatic"] = per_call / a->second;
  state.SetLabel(std::string(kernel_name(kKernel)) + (causal ? ", causal" : ", full") +
                 (split >= 0 ? ", split to " + std::to_string(split) + " blocks a SM" : ""));
}

/// qkv (n, 3 * heads * dim) on the device, uniform in [-1, 1].
exec::cuda::DeviceBuffer<float> random_qkv(int n, int width) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> host(std::size_t(n) * std::size_t(width));
  for (float& x : host) x = dist(rng);
  exec::cuda::DeviceBuffer<float> buffer;
  buffer.reserve(host.size());
  POLYATTN_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return buffer;
}

/// Seconds of GPU time of `run()` (which queues work on `stream`), per call, over the state's loop.
template <class Run>
void time_on_device(benchmark::State& state, cudaStream_t stream, Run run, double flops) {
  exec::cuda::Event start, stop;
  run();  // warm-up
  POLYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  double seconds = 0;
  for (auto _ : state) {
    POLYATTN_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    run();
    POLYATTN_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    POLYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    seconds += stop.seconds_since(start);
  }
  const double per_call = state.iterations() > 0 ? seconds / double(state.iterations()) : 0.0;
  state.counters["kernel_ms"] = per_call * 1e3;
  state.counters["GFLOP_per_s"] = per_call > 0 ? flops / per_call * 1e-9 : 0.0;
}

/// Each block normalises one row of n scores in place (exp(s - max) / sum); the peer's softmax.
__global__ void softmax_rows(float* s, int n) {
  __shared__ float partial[32];
  float* row = s + std::size_t(blockIdx.x) * std::size_t(n);
  const auto reduce = [&](float v, bool take_max) {
    v = take_max ? exec::cuda::warp_max(v) : exec::cuda::warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float r = partial[0];
    for (int w = 1; w < int(blockDim.x) / 32; ++w) r = take_max ? fmaxf(r, partial[w]) : r + partial[w];
    __syncthreads();
    return r;
  };
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, row[j]);
  m = reduce(m, true);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += row[j] = expf(row[j] - m);
  const float inv = 1.0f / reduce(sum, false);
  for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] *= inv;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(status));
}

/// args: heads, dim, n (full mask).
void BM_CublasScheme(benchmark::State& state) {
  if (exec::cuda::device_count() == 0) return state.SkipWithError("no CUDA device");
  const int heads = int(state.range(0)), dh = int(state.range(1)), n = int(state.range(2)), d = heads * dh;
  exec::cuda::DeviceBuffer<float> qkv = random_qkv(n, 3 * d), scores, out;
  scores.reserve(std::size_t(heads) * std::size_t(n) * std::size_t(n));
  out.reserve(std::size_t(n) * std::size_t(d));
  exec::cuda::Stream stream;
  cublasHandle_t handle = nullptr;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  check_cublas(cublasSetStream(handle, stream.get()), "cublasSetStream");
  check_cublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  const float alpha = 1.0f / std::sqrt(float(dh)), one = 1.0f, zero = 0.0f;
  const long long nn = (long long)n * n;
  // Row-major data seen column-major: S_h^T (n, n) = k_h q_h^T; out_h^T (dh, n) = v_h^T P_h^T.
  const auto run = [&] {
    check_cublas(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, dh, &alpha, qkv.data() + d, 3 * d, dh, qkv.data(),
                                           3 * d, dh, &zero, scores.data(), n, nn, heads),
                 "scores");
    softmax_rows<<<unsigned(heads) * unsigned(n), 256, 0, stream.get()>>>(scores.data(), n);
    exec::cuda::check_launch("softmax_rows");
    check_cublas(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, dh, n, n, &one, qkv.data() + 2 * d, 3 * d, dh,
                                           scores.data(), n, nn, &zero, out.data(), d, dh, heads),
                 "outputs");
  };
  time_on_device(state, stream.get(), run, 4.0 * double(n) * n * d);
  cublasDestroy(handle);
  state.SetLabel("cuBLAS sgemm + softmax kernel + sgemm, full");
}

/// args: heads, dim, n (full mask): Cuda::attention over q, k, v side by side in one buffer.
template <Kernel kKernel>
void BM_CudaAttention(benchmark::State& state) {
  if (exec::cuda::device_count() == 0) return state.SkipWithError("no CUDA device");
  const int heads = int(state.range(0)), dh = int(state.range(1)), n = int(state.range(2)), d = heads * dh;
  exec::cuda::DeviceBuffer<float> qkv = random_qkv(n, 3 * d), out;
  out.reserve(std::size_t(n) * std::size_t(d));
  exec::cuda::Stream stream;
  exec::Cuda cuda;
  cuda.set_kernel(kKernel);
  using Rows = exec::Cuda::DeviceRows<const float>;
  const auto run = [&] {
    cuda.attention(Rows{qkv.data(), 3 * d}, Rows{qkv.data() + d, 3 * d}, Rows{qkv.data() + 2 * d, 3 * d}, {out.data(), d}, n, n,
                   AttentionHeads{heads, heads, dh}, Mask::full, stream.get());
  };
  time_on_device(state, stream.get(), run, 4.0 * double(n) * n * d);
  state.SetLabel(std::string("Cuda::attention, ") + kernel_name(kKernel) + ", full (includes its jobs' upload and a wait)");
}

void PeerShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "dim", "n"});
  for (int heads : {6, 8})
    for (int n : {448, 1500, 4096}) b->Args({heads, 64, n});
  b->Unit(benchmark::kMillisecond)->MinTime(0.2);
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "dim", "n", "causal", "split"});
  for (int heads : {6, 8})
    for (int n : {448, 1500, 4096})
      for (int causal : {0, 1}) b->Args({heads, 64, n, causal, -1});
  for (int causal : {0, 1}) b->Args({8, 128, 1500, causal, -1});
  b->Unit(benchmark::kMillisecond)->MinTime(0.2);
}

/// The prefill kernel's split: none, and about 2, 4, 8 and 16 blocks a SM.
void Splits(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "dim", "n", "causal", "split"});
  for (int heads : {6, 8})
    for (int n : {448, 1500, 4096})
      for (int causal : {0, 1})
        for (int split : {0, 2, 4, 8, 16}) b->Args({heads, 64, n, causal, split});
  b->Unit(benchmark::kMillisecond)->MinTime(0.2);
}

}  // namespace

BENCHMARK(BM_CudaPrefill<Kernel::automatic>)->Apply(Shapes);
BENCHMARK(BM_CudaPrefill<Kernel::simple_prefill>)->Apply(Shapes);
BENCHMARK(BM_CublasScheme)->Apply(PeerShapes);
BENCHMARK(BM_CudaAttention<Kernel::automatic>)->Apply(PeerShapes);
BENCHMARK(BM_CudaAttention<Kernel::simple_prefill>)->Apply(PeerShapes);
BENCHMARK(BM_CudaPrefill<Kernel::automatic>)->Apply(Splits)->Name("BM_CudaPrefillSplit");
BENCHMARK(BM_CudaPrefill<Kernel::decode>)->Apply(Shapes);
BENCHMARK(BM_CudaPrefill<Kernel::general>)->Apply(Shapes);

BENCHMARK_MAIN();
