// --device cuda for the whisper_cuda executable: CudaDecoderCombinations (cuda_policies.cuh) and
// the cuBLAS engine for the products (cublas_dense.cuh) behind the Backend interface
// (backend.hpp), the only CUDA translation unit of the CLI.
#include <memory>
#include <string>

#include <polyattn/exec/cuda/cuda.cuh>

#include "backend.hpp"
#include "cublas_dense.cuh"
#include "cuda_policies.cuh"
#include "error.hpp"
#include "transcribe.hpp"  // the CUDA combinations are instantiated here

namespace polyattn::whisper {

namespace {

class CudaBackend final : public PolicyBackend<CudaDecoderCombinations> {
 public:
  std::string name() const override { return "cuda"; }
  // Asked before the model loads, so that a machine without a GPU gets one clear line rather
  // than a CudaError from the first executor's constructor.
  void check_device() const override {
    std::string reason;
    if (exec::cuda::device_count(&reason) == 0)
      throw Error("--device cuda: no usable CUDA device (" + reason + "); use --device cpu");
  }
  std::unique_ptr<Dense> make_dense() const override { return std::make_unique<CublasDense>(); }
  std::size_t device_peak_bytes() const override { return exec::cuda::device_bytes_peak(); }
};

}  // namespace

const Backend* cuda_backend() {
  static const CudaBackend backend;
  return &backend;
}

}  // namespace polyattn::whisper
