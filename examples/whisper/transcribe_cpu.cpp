// The CPU decoder combinations (policies.hpp), each instantiated once for every executable and
// test that transcribes: instantiating them in each translation unit that dispatches over them
// (the CLI, test_model.cpp, test_policies.cpp) compiled the whole decoder three times over. The
// Decoder<P> classes are instantiated here too, for the tests that drive a decoder directly.
#include "transcribe.hpp"

namespace polyattn::whisper {

#define POLYATTN_WHISPER_INSTANTIATE(P) \
  template class Decoder<P>;           \
  template Transcription WhisperModel::transcribe<P>(const AudioSource&, const TranscribeOptions&) const;
POLYATTN_WHISPER_DECODER_COMBINATIONS(POLYATTN_WHISPER_INSTANTIATE)
#undef POLYATTN_WHISPER_INSTANTIATE

}  // namespace polyattn::whisper
