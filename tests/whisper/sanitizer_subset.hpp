// How much of the real-model tests (tiny.en decoding jfk.wav and espeak-ng speech) runs. Each
// 30 s window takes about 20 s under ASan+UBSan, ten times the optimised time, so under the
// sanitizers (POLYATTN_WHISPER_SANITIZER_SUBSET, set by tests/whisper/CMakeLists.txt) they run a
// subset: the optimised pass runs every policy pair, and under the sanitizers every pair still
// runs on the synthetic model (test_model.cpp, "synthetic model: ...").
#pragma once

#include <cstddef>

#include <polyattn/dispatch.hpp>  // TypeList
#include <whisper/policies.hpp>

namespace whisper_test {

#ifdef POLYATTN_WHISPER_SANITIZER_SUBSET
inline constexpr bool kSanitizerSubset = true;
// Two exact pairs that between them replace both caches by converted weights: slim K-only self-
// attention with the shared E-cache, and MHA with the hybrid cross cache (layer 0's K, which the
// other layers read through W_k0^-1).
using RealModelCombinations =
    polyattn::TypeList<polyattn::whisper::combination::SlimKSharedE, polyattn::whisper::combination::Hybrid>;
inline constexpr std::size_t kEspeakSentences = 1;
#else
inline constexpr bool kSanitizerSubset = false;
using RealModelCombinations = polyattn::whisper::DecoderCombinations;
inline constexpr std::size_t kEspeakSentences = 4;
#endif

}  // namespace whisper_test
