// The decoder policy combinations instantiated on exec::Cuda (--device cuda). nvcc only: include
// from a .cu translation unit (cuda_backend.cu, tests/whisper/test_cuda.cu).
//
// Hnd everywhere: the layout whose per-head rows are contiguous, the decode-friendly one on the
// GPU as on the CPU (exec::Cuda mirrors Nhd, Hnd and Paged<P>). The names are the CPU policies'
// names (mha/hnd, ...): --device picks the executor, the policy names do not change with it.
// SlimK2 and XCache read rows as cached, so they run on exec::Cuda; SlimK1 and SlimK with RoPE
// derive rows at attend time and are refused at compile time (core/attend_with_hooks.hpp).
//
// The attention runs on the GPU and the products of the encoder and decoder through cuBLAS
// (cublas_dense.cuh); every attend and every product copies its inputs up and its outputs down.
#pragma once

#include <polyattn/exec/cuda/cuda.cuh>

#include "policies.hpp"

namespace polyattn::whisper {

template <class Kind>
using CudaSelf = SelfAttention<Kind, Hnd, exec::Cuda>;
template <class Option>
using CudaCross = CrossCacheAttention<Option, Hnd, exec::Cuda>;

// The MHA baseline, the two exact d-per-token self caches with the d-per-frame E-cache, and one
// Whisper-MLA rank (approximate: not required to match MHA's tokens). Each combination is a few
// seconds of nvcc: add the ones you need.
using CudaDecoderCombinations = TypeList<DecoderPolicies<CudaSelf<self_kind::Mha>, CudaCross<cross::Baseline>>,
                                         DecoderPolicies<CudaSelf<self_kind::SlimK>, CudaCross<cross::SharedE>>,
                                         DecoderPolicies<CudaSelf<self_kind::XCache>, CudaCross<cross::SharedE>>,
                                         DecoderPolicies<CudaSelf<self_kind::Mla<192>>, CudaCross<cross::Baseline>>>;

}  // namespace polyattn::whisper
