// Test support for CUDA test files (.cu): whether a CUDA device is present, asked once. Without
// one, GPU test cases are skipped and the reason is printed, so a build machine without a GPU
// still passes and says what did not run. Use: `const bool kNoDevice = !have_cuda_device();` at
// namespace scope, then `TEST_CASE("..." * doctest::skip(kNoDevice))`.
#pragma once

#include <cstdio>
#include <string>

#include <polyattn/exec/cuda/cuda.cuh>

namespace polyattn::testing {

/// Asked once; prints why GPU cases are skipped.
inline bool have_cuda_device() {
  static const bool available = [] {
    std::string reason;
    if (exec::cuda::device_count(&reason) > 0) return true;
    std::printf("no CUDA device: skipping the GPU test cases (%s)\n", reason.c_str());
    return false;
  }();
  return available;
}

}  // namespace polyattn::testing
