// The rules a Whisper model decodes by (the prompt, the suppressed tokens, the lengths), and how
// a CTranslate2 config.json changes them. Apart from model.hpp so that the config's tests and
// fuzzer read them without the model's decoder and policies.
#pragma once

#include <string>
#include <vector>

#include "ct2_model.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

struct DecodingRules {
  std::vector<int> prompt;             // e.g. {sot, no_timestamps}
  std::vector<int> suppress;           // at every step
  std::vector<int> suppress_at_begin;  // at the first sampled token only
  int eot = -1;
  int max_length = kWhisperTextContext;      // tokens the decoder holds: prompt + sampled
  int sample_len = kWhisperTextContext / 2;  // sampled tokens at most (WhisperModel::max_new_tokens)
};

// The decoding rules a CTranslate2 config.json sets: suppress_ids (every step) and
// suppress_ids_begin (the first sampled token) replace those lists of `rules` when present.
// `what` names the file in messages.
inline void apply_ct2_config(const Json& config, const std::string& what, DecodingRules& rules) {
  auto read_ids = [&](const char* key, std::vector<int>& ids) {
    if (!config.is_object()) return;
    const auto list = config.find(key);
    if (list == config.end()) return;
    const std::string field = what + ": " + key;
    ids.clear();
    for (const Json& id : json_array(*list, field)) ids.push_back(static_cast<int>(json_int(id, field)));
  };
  read_ids("suppress_ids", rules.suppress);
  read_ids("suppress_ids_begin", rules.suppress_at_begin);
}

}  // namespace polyattn::whisper
