// Where the decoder's attention runs (the CLI's --device): a Backend is one list of instantiated
// decoder policy combinations (policies.hpp) for one executor, behind a virtual interface so that
// the CLI (main.cpp, compiled once by the C++ compiler) never instantiates the CUDA ones itself.
//
//   cpu_backend()    DecoderCombinations on exec::CpuSimd (this header)
//   cuda_backend()   CudaDecoderCombinations on exec::Cuda (cuda_backend.cu), or nullptr in an
//                    executable linked with no_cuda_backend.cpp (built without nvcc); declared
//                    in cuda_backend.hpp
//
// A Backend also makes the Dense engine (dense.hpp) of its device for the products of the encoder
// and decoder: Eigen for cpu, cuBLAS for cuda (cublas_dense.cuh). LayerNorm, GELU, sampling and
// the projections inside the library's cross-attention run on the CPU whatever the backend.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_backend.hpp"
#include "onednn_dense.hpp"
#include "model.hpp"
#include "policies.hpp"

namespace polyattn::whisper {

class Backend {
 public:
  virtual ~Backend() = default;
  // The --device name: "cpu", "cuda".
  virtual std::string name() const = 0;
  // Throws an Error that says why when the device cannot run (no GPU at run time).
  virtual void check_device() const = 0;
  // "--self mha/nhd --cross baseline, ..." (available_policies).
  virtual std::string available_policies() const = 0;
  // The instantiated (--self, --cross) name pairs.
  virtual std::vector<std::pair<std::string, std::string>> policy_pairs() const = 0;
  // Throws UnsupportedError (listing what is available) unless (self, cross) is instantiated.
  virtual void check_policies(const std::string& self, const std::string& cross) const = 0;
  // A new engine for the products: one per model and decoder (weights are copied to a device
  // engine once and found again by address, dense.hpp).
  virtual std::unique_ptr<Dense> make_dense() const = 0;
  // Whether (self, cross) gives MHA's tokens up to float rounding (is_exact_policy); throws as check_policies.
  virtual bool exact(const std::string& self, const std::string& cross) const = 0;
  virtual Transcription transcribe(const WhisperModel& model, const std::string& self, const std::string& cross,
                                   const AudioSource& audio, const TranscribeOptions& opt) const = 0;
  // The most device memory this process's buffers held at once (weights, caches, activations),
  // in bytes; 0 where the backend has no device.
  virtual std::size_t device_peak_bytes() const { return 0; }
};

// A Backend over the combinations of one TypeList; the executor is part of each policy's type.
template <class Combinations>
class PolicyBackend : public Backend {
 public:
  std::string available_policies() const override { return whisper::available_policies<Combinations>(); }
  std::vector<std::pair<std::string, std::string>> policy_pairs() const override { return whisper::policy_pairs<Combinations>(); }
  void check_policies(const std::string& self, const std::string& cross) const override {
    dispatch_policies<Combinations>(self, cross, [](auto) {});
  }
  bool exact(const std::string& self, const std::string& cross) const override {
    bool result = false;
    dispatch_policies<Combinations>(self, cross, [&]<class P>(std::type_identity<P>) { result = is_exact_policy<P>; });
    return result;
  }
  // With the backend's engine unless opt names one; the engine lives as long as the call (and the
  // decoder it builds, whose converted weights it may hold copies of).
  Transcription transcribe(const WhisperModel& model, const std::string& self, const std::string& cross,
                           const AudioSource& audio, const TranscribeOptions& opt) const override {
    std::unique_ptr<Dense> engine;
    TranscribeOptions o = opt;
    if (!o.dense) {
      engine = make_dense();
      o.dense = engine.get();
    }
    Transcription result;
    dispatch_policies<Combinations>(self, cross, [&]<class P>(std::type_identity<P>) { result = model.transcribe<P>(audio, o); });
    return result;
  }
};

class CpuBackend final : public PolicyBackend<DecoderCombinations> {
 public:
  std::string name() const override { return "cpu"; }
  void check_device() const override {}
  std::unique_ptr<Dense> make_dense() const override { return std::make_unique<OnednnDense>(); }
};

inline const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace polyattn::whisper
