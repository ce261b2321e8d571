// Word error rate of a transcript against a reference: (substitutions + deletions +
// insertions) / reference words, by Levenshtein distance over words. Both texts are
// normalised first (lower case, punctuation dropped, apostrophes kept), as the usual English
// Whisper evaluations do in spirit; "you." and "You," count as the same word.
#pragma once

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>
#include <vector>

namespace polyattn::whisper {

inline std::vector<std::string> normalized_words(const std::string& text) {
  std::string clean;
  for (unsigned char c : text)
    clean += std::isalnum(c) || c == '\'' ? static_cast<char>(std::tolower(c)) : ' ';
  std::vector<std::string> words;
  std::istringstream in(clean);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Edit distance in words between the normalised texts, and the reference's word count.
struct WordErrors {
  std::size_t errors = 0, reference_words = 0;
  double rate() const { return reference_words ? static_cast<double>(errors) / static_cast<double>(reference_words) : 0.0; }
};

inline WordErrors word_errors(const std::string& reference, const std::string& hypothesis) {
  const std::vector<std::string> r = normalized_words(reference), h = normalized_words(hypothesis);
  std::vector<std::size_t> prev(h.size() + 1), cur(h.size() + 1);
  for (std::size_t j = 0; j <= h.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= r.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= h.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] == h[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return {prev[h.size()], r.size()};
}

}  // namespace polyattn::whisper
