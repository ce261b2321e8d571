// The one declaration the CLI's two executables define differently: cuda_backend() returns the
// exec::Cuda backend in `whisper_cuda` (cuda_backend.cu) and nullptr in `whisper` and any build
// without nvcc (no_cuda_backend.cpp). Kept apart from backend.hpp so that no_cuda_backend.cpp
// compiles in a moment instead of parsing the whole decoder (37 s at -O3 on the Zen 3 VM).
#pragma once

namespace polyattn::whisper {

class Backend;  // backend.hpp

// nullptr when this executable was built without the CUDA executor.
const Backend* cuda_backend();

}  // namespace polyattn::whisper
