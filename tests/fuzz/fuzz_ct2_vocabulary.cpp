// libFuzzer harness: a CTranslate2 vocabulary file, read as vocabulary.txt (parse_vocabulary_txt)
// and as vocabulary.json (parse_vocabulary_json), each then made a tokenizer
// (Tokenizer::from_byte_level), as load_ct2_model_dir and WhisperModel::load_ct2 do.
// Invariants: the text form has one token per line, none holding a newline (a trailing newline
// ends the last line); a tokenizer holds every token and its special ids are among them.
#include <whisper/ct2_model.hpp>
#include <whisper/tokenizer.hpp>

#include <algorithm>

#include "harness.hpp"

namespace pw = polyattn::whisper;

namespace {

void check_tokenizer(const std::vector<std::string>& vocab) {
  const pw::Tokenizer tok = pw::Tokenizer::from_byte_level(vocab);
  if (tok.size() != static_cast<int>(vocab.size()))
    polyattn_fuzz::broken("tokenizer holds " + std::to_string(tok.size()) + " tokens of " + std::to_string(vocab.size()));
  const pw::SpecialTokens& s = tok.special();
  for (const int id : {s.eot, s.sot, s.no_timestamps})
    if (id < 0 || id >= tok.size()) polyattn_fuzz::broken("special id " + std::to_string(id) + " outside the vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    const std::string_view text = polyattn_fuzz::as_text(bytes);
    const std::vector<std::string> lines = pw::parse_vocabulary_txt(text);
    const std::size_t newlines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    const std::size_t expected = newlines + (!text.empty() && text.back() != '\n' ? 1 : 0);
    if (lines.size() != expected)
      polyattn_fuzz::broken(std::to_string(lines.size()) + " tokens from a text of " + std::to_string(expected) + " lines");
    for (const std::string& t : lines)
      if (t.find('\n') != std::string::npos) polyattn_fuzz::broken("token '" + t + "' holds a newline");
    try {
      check_tokenizer(lines);
    } catch (const pw::Error&) {
    }
    check_tokenizer(pw::parse_vocabulary_json(text, "vocabulary.json"));
  });
}
