// CUDA runtime errors as polyattn exceptions: the failing call and cudaGetErrorString's text.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "polyattn/core/error.hpp"

namespace polyattn {

/// A CUDA runtime call failed (no device, out of device memory, a kernel fault, ...).
class CudaError : public Error {
 public:
  CudaError(const std::string& call, cudaError_t code)
      : Error("polyattn: " + call + " failed: " + cudaGetErrorName(code) + ": " + cudaGetErrorString(code)), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

namespace exec::cuda {

/// Throws CudaError naming `call` unless `code` is cudaSuccess.
inline void check(cudaError_t code, const char* call) {
  if (code != cudaSuccess) throw CudaError(call, code);
}

/// Checks a kernel launch (launch errors are only reported by cudaGetLastError).
inline void check_launch(const char* kernel) {
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) throw CudaError(std::string("launch of ") + kernel, code);
}

}  // namespace exec::cuda
}  // namespace polyattn

/// Runs a CUDA runtime call; on failure throws polyattn::CudaError with the call's text.
#define POLYATTN_CUDA_CHECK(call) ::polyattn::exec::cuda::check((call), #call)
