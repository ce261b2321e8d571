// Lets one function body serve host code and CUDA device code. Without nvcc the macro is
// plain `inline`, so every header stays compilable by an ordinary C++ compiler.
#pragma once

#if defined(__CUDACC__)
#define POLYATTN_HOST_DEVICE __host__ __device__ inline
#else
#define POLYATTN_HOST_DEVICE inline
#endif
