// Decode attention on the GPU (exec::Cuda) at L = 4096, 16384, 65536 and batch 1, 16, 64:
//   8 heads x 64:   MHA, GQA<2>, MQA, SlimK2 (K-only cache, half of MHA's)
//   16 heads x 128: MHA and Mla<512, 64> (DeepSeek-V2's latent 512 + RoPE key 64)
//   12 heads x 64:  MHA and Whisper-MLA (Whisper small: latent 96 + 4 kept key dims per head)
//   16-bit caches (Eigen::half, and bfloat16 for MHA) of MHA, SlimK2 and both MLAs at the same
//   shapes: half the bytes of their fp32 rows, read as __half / __nv_bfloat16, accumulated in fp32
//   Hnd (head-major rows) beside Nhd for MHA and SlimK2 (fp32) and MHA (half): whether the
//   token-major layout's strided rows cost bandwidth
// plus the general kernel (exec::Cuda::Kernel::general) beside the tiled one at L = 16384,
// Paged<16> at one shape, and the tiled kernel (Kernel::tiled) beside the streaming one, which
// runs MHA and GQA by default. A step is one query per sequence over its whole
// cache (attend), so it reads batch * L * bytes-per-token of cache. Counters:
//   GB_per_s         cache bytes / wall time of the call (host hooks, queries up, outputs down)
//   kernel_GB_per_s  cache bytes / GPU time of the attention kernels alone
//   of_d2d_bw        kernel_GB_per_s / d2d_GB_per_s, the roofline fraction
//   d2d_GB_per_s     a device-to-device cudaMemcpy measured in this run, counting bytes read
//                    plus bytes written (what HBM moves per second)
//   cache_vs_mha     bytes per token / fp32 MHA's at the same shape
//   kernel_vs_mha    kernel time per step / fp32 MHA's at the same shape, L and batch (MHA's rows
//                    run first, in registration order; absent when MHA's row was skipped)
// Compare variants as ratios within one run.
#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <polyattn/attention.hpp>
#include <polyattn/cache/contiguous.hpp>
#include <polyattn/cache/paged.hpp>
#include <polyattn/exec/cuda/cuda.cuh>
#include <polyattn/variants/mha_gqa.hpp>
#include <polyattn/variants/mla.hpp>
#include <polyattn/variants/slim_k.hpp>

#include "support/variant_inputs.hpp"

namespace {

using namespace polyattn;

using DeepSeekMla = Mla<512, 64, MlaKeyPart::decoupled_rope>;
using WhisperMla = Mla<96, 4, MlaKeyPart::preserved>;

/// Best-of-`repeats` device-to-device copy of `bytes`, in bytes moved (read + write) per second.
double measure_d2d_bandwidth(std::size_t bytes = std::size_t(1) << 30, int repeats = 10) {
  exec::cuda::DeviceBuffer<std::byte> src, dst;
  src.reserve(bytes);
  dst.reserve(bytes);
  POLYATTN_CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
  exec::cuda::Stream stream;
  exec::cuda::Event start, stop;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    start.record(stream);
    POLYATTN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    stop.record(stream);
    stream.synchronize();
    best = std::max(best, 2.0 * double(bytes) / stop.seconds_since(start));
  }
  return best;
}

/// Measured once per process, on first use; 0 without a device.
double d2d_bandwidth() {
  static const double bandwidth = exec::cuda::device_count() > 0 ? measure_d2d_bandwidth() : 0.0;
  return bandwidth;
}

bool skip_without_device(benchmark::State& state) {
  std::string reason;
  if (exec::cuda::device_count(&reason) > 0) return false;
  state.SkipWithError(("no CUDA device: skipping (" + reason + ")").c_str());
  return true;
}

/// MHA's kernel seconds per step by (heads, dim, L, batch), for the other variants' ratios.
std::map<std::array<long, 4>, double>& mha_kernel_seconds() {
  static std::map<std::array<long, 4>, double> seconds;
  return seconds;
}

/// Half of the host's memory: the host store holds the whole cache too (it is the source of truth).
std::size_t host_cache_limit() { return std::size_t(sysconf(_SC_PHYS_PAGES)) * std::size_t(sysconf(_SC_PAGE_SIZE)) / 2; }

/// args: n_heads, head_dim, context length L, batch. T: the cache element (float, half, bfloat16).
/// kKernel: general forces the general kernel (kernels.cuh) where the tiled one would run.
/// kSplit: a fifth argument sets the streaming kernel's split target (blocks per SM).
template <class Variant, class Layout, class T = float, exec::Cuda::Kernel kKernel = exec::Cuda::Kernel::automatic, bool kSplit = false>
void BM_CudaDecode(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const AttentionShape shape{int(state.range(0)), int(state.range(1))};
  const int length = int(state.range(2)), batch = int(state.range(3));
  using A = Attention<Variant, Layout, exec::Cuda, T>;
  const std::size_t per_token = A::cache_bytes_per_token(shape);
  const std::size_t bytes_per_step = per_token * std::size_t(length) * std::size_t(batch);
  std::size_t free_bytes = 0, total_bytes = 0;
  POLYATTN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes_per_step + (std::size_t(256) << 20) > free_bytes || bytes_per_step > host_cache_limit()) {
    state.SkipWithError(("cache of " + std::to_string(bytes_per_step >> 20) + " MiB does not fit the device's " +
                         std::to_string(free_bytes >> 20) + " MiB free or half of the host's memory")
                            .c_str());
    return;
  }

  std::mt19937 rng(42);
  A attn(shape, {.max_sequences = batch, .capacity = length}, bench::Inputs<Variant>::params(shape, rng));
  attn.executor().set_kernel(kKernel);
  if constexpr (kSplit) attn.executor().set_stream_blocks_per_sm(int(state.range(4)));
  std::vector<int> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back(attn.open_sequence());
  const bench::Inputs<Variant> block(shape, rng);
  bench::fill_cache(attn, seqs, length, [&](A& a, int seq, int n) { a.append(seq, block.rows(n)); });

  const RowMatrixXf q = bench::uniform(batch, Variant::query_width(shape), rng);
  RowMatrixXf out(batch, Variant::output_width(shape));
  d2d_bandwidth();              // measured before timing starts
  attn.attend(seqs, q, out);    // the first call copies the whole cache to the device
  double kernel_seconds = 0;
  for (auto _ : state) {
    attn.attend(seqs, q, out);
    kernel_seconds += attn.executor().last_kernel_seconds();
    benchmark::DoNotOptimize(out.data());
  }

  using benchmark::Counter;
  const double steps = double(state.iterations());
  const double kernel_rate = kernel_seconds > 0 ? double(bytes_per_step) * steps / kernel_seconds : 0.0;
  state.counters["cache_B_per_token"] = double(per_token);
  state.counters["MB_per_step"] = double(bytes_per_step) * 1e-6;
  state.counters["GB_per_s"] = Counter(double(bytes_per_step) * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["kernel_GB_per_s"] = kernel_rate * 1e-9;
  state.counters["of_d2d_bw"] = d2d_bandwidth() > 0 ? kernel_rate / d2d_bandwidth() : 0.0;
  state.counters["d2d_GB_per_s"] = d2d_bandwidth() * 1e-9;
  state.counters["cache_vs_mha"] = double(per_token) / double(Attention<Mha, Layout, exec::Cuda>::cache_bytes_per_token(shape));
  const std::array<long, 4> key{long(state.range(0)), long(state.range(1)), long(length), long(batch)};
  const double step_seconds = steps > 0 ? kernel_seconds / steps : 0.0;
  if constexpr (std::is_same_v<Variant, Mha> && std::is_same_v<Layout, Nhd> && std::is_same_v<T, float> &&
                kKernel == exec::Cuda::Kernel::automatic && !kSplit) {
    mha_kernel_seconds()[key] = step_seconds;
  } else if (const auto mha = mha_kernel_seconds().find(key); mha != mha_kernel_seconds().end() && mha->second > 0) {
    state.counters["kernel_vs_mha"] = step_seconds / mha->second;
  }
  state.SetLabel(A::name() + (kKernel == exec::Cuda::Kernel::general ? " (general kernel)"
                              : kKernel == exec::Cuda::Kernel::tiled ? " (tiled kernel)"
                                                                      : ""));
}

void Shapes(benchmark::internal::Benchmark* b, int heads, int dim) {
  for (int length : {4096, 16384, 65536})
    for (int batch : {1, 16, 64}) b->Args({heads, dim, length, batch});
  b->ArgNames({"heads", "dim", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}
void DecodeShapes(benchmark::internal::Benchmark* b) { Shapes(b, 8, 64); }
void DeepSeekShapes(benchmark::internal::Benchmark* b) { Shapes(b, 16, 128); }
void WhisperSmallShapes(benchmark::internal::Benchmark* b) { Shapes(b, 12, 64); }

/// The general kernel beside the tiled one: L = 16384 only.
void GeneralShapes(benchmark::internal::Benchmark* b, int heads, int dim) {
  for (int batch : {1, 16, 64}) b->Args({heads, dim, 16384, batch});
  b->ArgNames({"heads", "dim", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}
void GeneralDecodeShapes(benchmark::internal::Benchmark* b) { GeneralShapes(b, 8, 64); }
void GeneralDeepSeekShapes(benchmark::internal::Benchmark* b) { GeneralShapes(b, 16, 128); }

/// The streaming kernel's split target (blocks per SM) at one long sequence and at batch 16.
void SplitShapes(benchmark::internal::Benchmark* b) {
  for (auto [length, batch] : {std::pair{65536, 1}, std::pair{16384, 16}})
    for (int split : {2, 4, 8, 16}) b->Args({8, 64, length, batch, split});
  b->ArgNames({"heads", "dim", "L", "batch", "split"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}

void LayoutShape(benchmark::internal::Benchmark* b) {
  b->Args({8, 64, 16384, 16})->ArgNames({"heads", "dim", "L", "batch"})->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
}

/// The roofline itself, as its own row of the report.
void BM_DeviceCopy(benchmark::State& state) {
  if (skip_without_device(state)) return;
  for (auto _ : state) benchmark::DoNotOptimize(d2d_bandwidth());
  state.counters["d2d_GB_per_s"] = d2d_bandwidth() * 1e-9;
}

}  // namespace

BENCHMARK(BM_DeviceCopy)->Iterations(1);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Gqa<2>, polyattn::Nhd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mqa, polyattn::Nhd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::SlimK2, polyattn::Nhd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd>)->Apply(DeepSeekShapes);
BENCHMARK(BM_CudaDecode<DeepSeekMla, polyattn::Nhd>)->Apply(DeepSeekShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd>)->Apply(WhisperSmallShapes);
BENCHMARK(BM_CudaDecode<WhisperMla, polyattn::Nhd>)->Apply(WhisperSmallShapes);
// Head-major rows (each block streams one contiguous range) beside the token-major ones above.
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Hnd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::SlimK2, polyattn::Hnd>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, Eigen::half>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Hnd, Eigen::half>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, Eigen::bfloat16>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::SlimK2, polyattn::Nhd, Eigen::half>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<DeepSeekMla, polyattn::Nhd, Eigen::half>)->Apply(DeepSeekShapes);
BENCHMARK(BM_CudaDecode<WhisperMla, polyattn::Nhd, Eigen::half>)->Apply(WhisperSmallShapes);
constexpr auto kGeneral = polyattn::exec::Cuda::Kernel::general;
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, float, kGeneral>)->Apply(GeneralDecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::SlimK2, polyattn::Nhd, float, kGeneral>)->Apply(GeneralDecodeShapes);
BENCHMARK(BM_CudaDecode<DeepSeekMla, polyattn::Nhd, float, kGeneral>)->Apply(GeneralDeepSeekShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Paged<16>>)->Apply(LayoutShape);
// The tiled kernel, forced, where the streaming one runs by default (MHA, GQA: stream_plan.hpp).
constexpr auto kTiled = polyattn::exec::Cuda::Kernel::tiled;
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, float, kTiled>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Gqa<2>, polyattn::Nhd, float, kTiled>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, float, kTiled>)->Apply(DeepSeekShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, Eigen::half, kTiled>)->Apply(DecodeShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Paged<16>, float, kTiled>)->Apply(LayoutShape);
constexpr auto kAutomatic = polyattn::exec::Cuda::Kernel::automatic;
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, float, kAutomatic, true>)->Apply(SplitShapes);
BENCHMARK(BM_CudaDecode<polyattn::Gqa<2>, polyattn::Nhd, float, kAutomatic, true>)->Apply(SplitShapes);
BENCHMARK(BM_CudaDecode<polyattn::Mha, polyattn::Nhd, Eigen::half, kAutomatic, true>)->Apply(SplitShapes);

BENCHMARK_MAIN();
