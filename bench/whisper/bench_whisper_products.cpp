// The Whisper example's dense products on its CPU engines, on 2 threads: EigenDense (Eigen's
// GEMM) and OnednnDense (oneDNN's sgemm) in the same panel scheme (weight_matrix.hpp), float32;
// OnednnBf16Dense and OnednnInt8Dense (the CLI's --compute-type bfloat16 and int8), which round
// or quantize the weights at their first use (outside the timed loop here, as in a run that
// has warmed up):
//   BM_Product/engine/shape/rows  one stored_affine, float16 weights of tiny.en's shapes; 1500
//                                 rows is an encoder window, 1-80 a decoding step's batch x beams
//   BM_EncoderWindow/engine       one 30 s window through tiny.en's encoder (models/tiny.en, or
//                                 $POLYATTN_WHISPER_MODEL_DIR): conv stem, 4 layers, attention
// Reports GFLOP/s (2 multiply-adds counted as 2 flops each). No time is asserted.
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>

#include <whisper/model.hpp>
#include <whisper/onednn_bf16_dense.hpp>
#include <whisper/onednn_dense.hpp>
#include <whisper/onednn_int8_dense.hpp>

namespace {

using namespace polyattn::whisper;

constexpr int kThreads = 2;

// 0 Eigen, 1 oneDNN float32, 2 oneDNN bfloat16, 3 oneDNN int8.
std::unique_ptr<Dense> make_engine(int engine) {
  if (engine == 0) return std::make_unique<EigenDense>();
  if (engine == 2) return std::make_unique<OnednnBf16Dense>();
  if (engine == 3) return std::make_unique<OnednnInt8Dense>();
  return std::make_unique<OnednnDense>();
}

RowMatrixXf uniform(Eigen::Index rows, Eigen::Index cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

// (out, in) of tiny.en's float16 layers: the fused Q/K/V and the attention output of an
// encoder layer, the MLP's two layers.
constexpr int kShapes[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};

// args: engine (make_engine), shape index, rows of x.
void BM_Product(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const std::unique_ptr<Dense> engine = make_engine(int(state.range(0)));
  const auto [out, in] = kShapes[state.range(1)];
  const Eigen::Index rows = state.range(2);
  std::mt19937 rng(3);
  const StoredLinear layer{WeightMatrix(WeightMatrix::HalfMatrix((uniform(out, in, rng) * 0.05f).cast<Eigen::half>())),
                           uniform(1, out, rng)};
  const RowMatrixXf x = uniform(rows, in, rng);
  RowMatrixXf y(rows, out);
  engine->linear_into(x, layer, y);  // the first use: a converting engine makes its copy of W
  for (auto _ : state) {
    engine->linear_into(x, layer, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows) * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(engine->name());
}

// args: engine.
void BM_EncoderWindow(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const char* env = std::getenv("POLYATTN_WHISPER_MODEL_DIR");
  const std::filesystem::path dir = env ? env : "models/tiny.en";
  if (!std::filesystem::exists(dir / "model.bin")) {
    state.SkipWithError("no tiny.en model: set POLYATTN_WHISPER_MODEL_DIR");
    return;
  }
  static const WhisperModel model = WhisperModel::load_ct2(dir);
  const std::unique_ptr<Dense> engine = make_engine(int(state.range(0)));
  std::mt19937 rng(5);
  const RowMatrixXf mel = uniform(model.dims().n_mels, 3000, rng);  // (n_mels, frames): the encoder's cost does not depend on the values
  benchmark::DoNotOptimize(model.encode(mel, *engine).data());  // the first use: as in BM_Product
  for (auto _ : state) benchmark::DoNotOptimize(model.encode(mel, *engine).data());
  state.SetLabel(engine->name());
}

}  // namespace

BENCHMARK(BM_Product)
    ->ArgNames({"engine", "shape", "rows"})
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3}, {1, 5, 16, 80, 1500}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_EncoderWindow)->ArgNames({"engine"})->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_MAIN();
