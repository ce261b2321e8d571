// Whisper's tokenizer, decoding direction only: token ids -> UTF-8 text, plus the ids of
// the special tokens. Two vocabulary forms are accepted:
//  - byte-level (CTranslate2 / Hugging Face vocabulary files): GPT-2's bytes_to_unicode
//    maps every byte to a printable code point ("Ġ" = space); decoding maps them back.
//  - raw bytes (whisper.cpp ggml files, whose converter already undid the mapping).
// Special-token ids are looked up by name in the vocabulary when it has them; ggml files
// store only the first n_tokens entries, so there the ids follow whisper.cpp's rule.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "error.hpp"

namespace polyattn::whisper {

// The largest Whisper vocabulary: large-v3's, the multilingual models' 51865 tokens and one
// more language token.
inline constexpr int kWhisperMaxVocabulary = 51866;

struct SpecialTokens {
  int eot = -1;              // <|endoftext|>
  int sot = -1;              // <|startoftranscript|>
  int translate = -1;        // <|translate|>
  int transcribe = -1;       // <|transcribe|>
  int start_of_lm = -1;      // <|startoflm|>
  int start_of_prev = -1;    // <|startofprev|>
  int no_speech = -1;        // <|nocaptions|> (older) / <|nospeech|>
  int no_timestamps = -1;    // <|notimestamps|>
  int timestamp_begin = -1;  // <|0.00|>
};

// GPT-2 bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes
// to code points 256.. in byte order. Returns the code point of each byte.
inline std::array<char32_t, 256> gpt2_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[static_cast<std::size_t>(b)] = static_cast<char32_t>(printable ? b : next++);
  }
  return table;
}

// Replaces invalid UTF-8 (a token sequence cut inside a character) by U+FFFD per bad byte,
// like Python's bytes.decode(errors="replace") does approximately.
inline std::string sanitize_utf8(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + static_cast<std::size_t>(len) <= s.size();
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and values above U+10FFFF.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF))
      ok = false;
    if (ok) {
      out.append(s.substr(i, static_cast<std::size_t>(len)));
      i += static_cast<std::size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

class Tokenizer {
 public:
  // From a byte-level vocabulary (one string per id, as in vocabulary.txt / .json).
  static Tokenizer from_byte_level(const std::vector<std::string>& vocab) {
    std::unordered_map<char32_t, std::uint8_t> to_byte;
    const auto table = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; ++b) to_byte[table[static_cast<std::size_t>(b)]] = static_cast<std::uint8_t>(b);
    Tokenizer t;
    t.tokens_.reserve(vocab.size());
    for (std::size_t id = 0; id < vocab.size(); ++id) {
      const std::string& s = vocab[id];
      std::string bytes;
      for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        char32_t cp;
        std::size_t len;
        if (c < 0x80) cp = c, len = 1;
        else if ((c >> 5) == 0x6 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), len = 2;
        else cp = 0xFFFFFFFF, len = 1;
        const auto it = to_byte.find(cp);
        if (it == to_byte.end()) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
          throw FormatError("vocabulary: token " + std::to_string(id) + " ('" + s + "') contains " +
                            (cp == 0xFFFFFFFF ? std::string("a byte outside") : std::string(buf) + ", outside") +
                            " GPT-2's byte-level alphabet");
        }
        bytes += static_cast<char>(it->second);
        i += len;
      }
      t.tokens_.push_back(std::move(bytes));
    }
    t.index();
    t.special_.eot = t.require("<|endoftext|>");
    t.special_.sot = t.require("<|startoftranscript|>");
    t.special_.no_timestamps = t.require("<|notimestamps|>");
    t.special_.translate = t.find("<|translate|>").value_or(-1);
    t.special_.transcribe = t.find("<|transcribe|>").value_or(-1);
    t.special_.start_of_lm = t.find("<|startoflm|>").value_or(-1);
    t.special_.start_of_prev = t.find("<|startofprev|>").value_or(-1);
    t.special_.no_speech = t.find("<|nocaptions|>").value_or(t.find("<|nospeech|>").value_or(-1));
    t.special_.timestamp_begin = t.find("<|0.00|>").value_or(-1);
    return t;
  }

  // From a ggml vocabulary: raw token bytes for ids 0 .. raw.size()-1 and the model's
  // n_vocab. Ids past raw.size() are special tokens, placed as whisper.cpp places them:
  // English-only (n_vocab < 51865): eot 50256, sot 50257, translate 50357 .. beg 50363;
  // multilingual: eot and sot one higher, the task tokens shifted by the number of
  // languages minus 98.
  static Tokenizer from_raw_bytes(const std::vector<std::string>& raw, int n_vocab) {
    // n_vocab sizes the token table: bounded by Whisper's vocabularies before anything is named.
    if (n_vocab < 50364 || n_vocab > kWhisperMaxVocabulary || static_cast<std::size_t>(n_vocab) < raw.size())
      throw FormatError("ggml vocabulary: n_vocab " + std::to_string(n_vocab) + " is not a Whisper vocabulary size (50364 to " +
                        std::to_string(kWhisperMaxVocabulary) + ", at least the " + std::to_string(raw.size()) + " stored tokens)");
    const bool multilingual = n_vocab >= 51865;
    SpecialTokens s;
    s.eot = 50256 + multilingual;
    s.sot = 50257 + multilingual;
    const int dt = multilingual ? (n_vocab - 51765 - 1) - 98 : 0;
    s.translate = 50357 + dt;
    s.transcribe = 50358 + dt;
    s.start_of_lm = 50359 + dt;
    s.start_of_prev = 50360 + dt;
    s.no_speech = 50361 + dt;
    s.no_timestamps = 50362 + dt;
    s.timestamp_begin = 50363 + dt;
    if (raw.size() > static_cast<std::size_t>(s.eot + 1))
      throw FormatError("ggml vocabulary: " + std::to_string(raw.size()) + " stored tokens overlap the special tokens (eot = " +
                        std::to_string(s.eot) + ")");
    Tokenizer t;
    t.tokens_ = raw;
    const std::pair<int, const char*> names[] = {
        {s.eot, "<|endoftext|>"}, {s.sot, "<|startoftranscript|>"}, {s.translate, "<|translate|>"},
        {s.transcribe, "<|transcribe|>"}, {s.start_of_lm, "<|startoflm|>"}, {s.start_of_prev, "<|startofprev|>"},
        {s.no_speech, "<|nocaptions|>"}, {s.no_timestamps, "<|notimestamps|>"}};
    for (int id = static_cast<int>(raw.size()); id < n_vocab; ++id) {
      std::string name = "<|special_" + std::to_string(id) + "|>";  // language tokens
      for (const auto& [sid, sname] : names)
        if (sid == id) name = sname;
      if (id >= s.timestamp_begin) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "<|%.2f|>", 0.02 * (id - s.timestamp_begin));
        name = buf;
      }
      t.tokens_.push_back(std::move(name));
    }
    t.special_ = s;
    t.index();
    return t;
  }

  int size() const { return static_cast<int>(tokens_.size()); }
  const SpecialTokens& special() const { return special_; }

  // The bytes of one token. Throws Error for an id out of range.
  const std::string& token(int id) const {
    if (id < 0 || id >= size())
      throw Error("tokenizer: token id " + std::to_string(id) + " is not in [0, " + std::to_string(size()) + ")");
    return tokens_[static_cast<std::size_t>(id)];
  }

  // Id of the token whose bytes are exactly `bytes`.
  std::optional<int> find(std::string_view bytes) const {
    const auto it = ids_.find(std::string(bytes));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  // Text of the ordinary tokens among `ids` (ids >= eot, i.e. special and timestamp
  // tokens, are skipped), as valid UTF-8.
  std::string decode(std::span<const int> ids) const {
    std::string bytes;
    for (const int id : ids) {
      const std::string& t = token(id);  // range-checked even when skipped
      if (id < special_.eot || special_.eot < 0) bytes += t;
    }
    return sanitize_utf8(bytes);
  }

 private:
  void index() {
    ids_.clear();
    for (std::size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<int>(i));
  }
  int require(std::string_view name) const {
    const auto id = find(name);
    if (!id) throw FormatError("vocabulary: special token " + std::string(name) + " is missing");
    return *id;
  }

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int> ids_;
  SpecialTokens special_;
};

}  // namespace polyattn::whisper
