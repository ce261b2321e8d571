// cuda_backend() for the plain `whisper` executable (and any build without nvcc): there is no
// CUDA executor, so --device cuda is refused by the CLI (main.cpp).
#include "cuda_backend.hpp"

namespace polyattn::whisper {

const Backend* cuda_backend() { return nullptr; }

}  // namespace polyattn::whisper
