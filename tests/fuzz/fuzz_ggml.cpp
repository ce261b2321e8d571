// libFuzzer harness: a whisper.cpp ggml file, parsed (parse_ggml, header only and in full),
// assembled into Whisper's weights (weights_from_ggml) and its vocabulary made a tokenizer
// (Tokenizer::from_raw_bytes), as WhisperModel::load_ggml_file does.
// Invariants: the filter bank and every tensor hold their shape's product of elements, the
// vocabulary is no longer than n_vocab, the weights have the sizes their dimensions say, within
// Whisper's architecture, and the tokenizer holds n_vocab tokens.
#include <whisper/ggml_model.hpp>
#include <whisper/tokenizer.hpp>
#include <whisper/weights.hpp>

#include "harness.hpp"
#include "model_invariants.hpp"

namespace pw = polyattn::whisper;

namespace {

void check_header(const pw::GgmlModel& g) {
  polyattn_fuzz::check_element_count("the mel filter bank", {g.mel_filters.rows(), g.mel_filters.cols()},
                                     static_cast<std::size_t>(g.mel_filters.size()));
  if (g.vocabulary.size() > static_cast<std::size_t>(g.hparams.n_vocab))
    polyattn_fuzz::broken(std::to_string(g.vocabulary.size()) + " tokens stored for n_vocab " + std::to_string(g.hparams.n_vocab));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    check_header(pw::parse_ggml(bytes, pw::GgmlLoad::header_only));
    const pw::GgmlModel g = pw::parse_ggml(bytes);
    check_header(g);
    for (const auto& [name, t] : g.tensors) {
      polyattn_fuzz::check_element_count("tensor '" + name + "'", t.ne, t.elements.size());
      if (t.ne.empty()) polyattn_fuzz::broken("tensor '" + name + "' has no dimensions");
    }
    polyattn_fuzz::check_weights(pw::weights_from_ggml(g));
    const pw::Tokenizer tok = pw::Tokenizer::from_raw_bytes(g.vocabulary, g.hparams.n_vocab);
    if (tok.size() != g.hparams.n_vocab)
      polyattn_fuzz::broken("tokenizer of " + std::to_string(tok.size()) + " tokens for n_vocab " + std::to_string(g.hparams.n_vocab));
  });
}
