// libFuzzer harness: Whisper's tokenizer, built from a byte-level vocabulary
// (Tokenizer::from_byte_level, CTranslate2) or from raw token bytes and n_vocab
// (Tokenizer::from_raw_bytes, ggml), then decoding ids (Tokenizer::decode).
//
// Input layout (tokenizer_input() in make_seed_corpus.cpp writes it):
//   u8 form (even: byte-level, odd: raw bytes), i32 n_vocab (raw form only),
//   the tokens separated by '\n' up to the first NUL byte, then i32 token ids to decode.
// Invariants: the tokenizer holds every token (n_vocab of them for the raw form), its special
// ids are tokens, each decoded token is found by its bytes, and a decoded text is valid UTF-8 (so
// sanitize_utf8 leaves it unchanged) no longer than 3 bytes per token byte (U+FFFD per bad byte).
#include <whisper/ct2_model.hpp>  // parse_vocabulary_txt
#include <whisper/tokenizer.hpp>

#include <algorithm>
#include <cstring>

#include "harness.hpp"

namespace pw = polyattn::whisper;

namespace {

std::int32_t read_i32(std::span<const std::uint8_t>& bytes) {
  std::int32_t v = 0;
  const std::size_t n = std::min<std::size_t>(4, bytes.size());
  std::memcpy(&v, bytes.data(), n);
  bytes = bytes.subspan(n);
  return v;
}

void check(const pw::Tokenizer& tok, std::span<const int> ids) {
  const pw::SpecialTokens& s = tok.special();
  for (const int id : {s.eot, s.sot, s.no_timestamps, s.translate, s.transcribe, s.start_of_lm, s.start_of_prev, s.no_speech,
                       s.timestamp_begin})
    if (id < -1 || id >= tok.size()) polyattn_fuzz::broken("special id " + std::to_string(id) + " outside the vocabulary");
  std::size_t token_bytes = 0;
  for (const int id : ids) {
    if (id < 0 || id >= tok.size()) continue;
    const auto found = tok.find(tok.token(id));
    if (!found || tok.token(*found) != tok.token(id)) polyattn_fuzz::broken("token " + std::to_string(id) + " is not found by its bytes");
    token_bytes += tok.token(id).size();
  }
  const std::string text = tok.decode(ids);  // throws for an id out of range
  if (pw::sanitize_utf8(text) != text) polyattn_fuzz::broken("decoded text is not valid UTF-8");
  if (text.size() > 3 * token_bytes)
    polyattn_fuzz::broken("decoded " + std::to_string(text.size()) + " bytes from tokens of " + std::to_string(token_bytes));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    if (bytes.empty()) return;
    const bool raw_form = bytes[0] & 1;
    bytes = bytes.subspan(1);
    const std::int32_t n_vocab = read_i32(bytes);
    const auto nul = std::find(bytes.begin(), bytes.end(), std::uint8_t{0});
    const std::vector<std::string> vocab =
        pw::parse_vocabulary_txt(polyattn_fuzz::as_text(bytes.first(static_cast<std::size_t>(nul - bytes.begin()))));
    std::vector<int> ids;
    for (auto rest = bytes.subspan(std::min<std::size_t>(bytes.size(), static_cast<std::size_t>(nul - bytes.begin()) + 1));
         rest.size() >= 4;)
      ids.push_back(read_i32(rest));
    if (raw_form) {
      const pw::Tokenizer tok = pw::Tokenizer::from_raw_bytes(vocab, n_vocab);
      if (tok.size() != n_vocab) polyattn_fuzz::broken("raw tokenizer of " + std::to_string(tok.size()) + " tokens for n_vocab " + std::to_string(n_vocab));
      check(tok, ids);
    } else {
      const pw::Tokenizer tok = pw::Tokenizer::from_byte_level(vocab);
      if (tok.size() != static_cast<int>(vocab.size())) polyattn_fuzz::broken("tokenizer holds " + std::to_string(tok.size()) + " of " + std::to_string(vocab.size()) + " tokens");
      check(tok, ids);
    }
  });
}
