// WhisperModel: weights + tokenizer + decoding rules, and transcription of whole
// recordings. Greedy decoding follows openai-whisper for English-only models without
// timestamps: prompt <|startoftranscript|><|notimestamps|>; at the first sampled token
// suppress " " and <|endoftext|> (suppress_blank); always suppress the config's
// suppress_ids; stop at <|endoftext|> or when the 448-token context is full. Audio longer
// than 30 s is cut into consecutive 30 s windows decoded independently (no timestamps, so
// no seeking by segment ends), and their texts are concatenated.
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ct2_model.hpp"
#include "decoder.hpp"
#include "encoder.hpp"
#include "error.hpp"
#include "ggml_model.hpp"
#include "mel.hpp"
#include "tokenizer.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

struct DecodingRules {
  std::vector<int> prompt;             // e.g. {sot, no_timestamps}
  std::vector<int> suppress;           // at every step
  std::vector<int> suppress_at_begin;  // at the first sampled token only
  int eot = -1;
  int max_length = 448;  // prompt + sampled tokens
};

struct Transcript {
  std::string text;
  std::vector<int> tokens;  // sampled tokens of every window, without prompt and eot
  int windows = 0;
  double mel_ms = 0, encode_ms = 0, decode_ms = 0;
};

class WhisperModel {
 public:
  WhisperModel(WhisperWeights weights, Tokenizer tokenizer, DecodingRules rules)
      : w_(std::move(weights)), tok_(std::move(tokenizer)), rules_(std::move(rules)),
        filters_(mel_filters_slaney(16000, 400, w_.dims.n_mels)) {
    if (tok_.size() != w_.dims.n_vocab)
      throw ModelError("vocabulary has " + std::to_string(tok_.size()) + " tokens, the model " +
                       std::to_string(w_.dims.n_vocab));
    auto check_ids = [&](const std::vector<int>& ids, const char* what) {
      for (int id : ids)
        if (id < 0 || id >= w_.dims.n_vocab)
          throw ModelError(std::string(what) + " token id " + std::to_string(id) + " is not in [0, " +
                           std::to_string(w_.dims.n_vocab) + ")");
    };
    check_ids(rules_.prompt, "prompt");
    check_ids(rules_.suppress, "suppress_ids");
    check_ids(rules_.suppress_at_begin, "suppress_ids_begin");
    check_ids({rules_.eot}, "end-of-text");
    rules_.max_length = std::min(rules_.max_length, w_.dims.n_text_ctx);
    if (rules_.prompt.empty() || static_cast<int>(rules_.prompt.size()) >= rules_.max_length)
      throw ModelError("prompt of " + std::to_string(rules_.prompt.size()) + " tokens does not fit the context");
  }

  // A CTranslate2 model directory (model.bin, config.json, vocabulary.*).
  static WhisperModel load_ct2(const std::filesystem::path& dir) {
    Ct2ModelDir m = load_ct2_model_dir(dir);
    WhisperWeights w = weights_from_ct2(m.model);
    Tokenizer tok = Tokenizer::from_byte_level(m.vocabulary);
    DecodingRules rules = default_rules(tok);
    const std::string cfg = (dir / "config.json").string();
    if (const Json* s = m.config.find("suppress_ids")) {
      rules.suppress.clear();
      for (const Json& id : s->as_array(cfg + ": suppress_ids")) rules.suppress.push_back(static_cast<int>(id.as_int(cfg + ": suppress_ids")));
    }
    if (const Json* s = m.config.find("suppress_ids_begin")) {
      rules.suppress_at_begin.clear();
      for (const Json& id : s->as_array(cfg + ": suppress_ids_begin"))
        rules.suppress_at_begin.push_back(static_cast<int>(id.as_int(cfg + ": suppress_ids_begin")));
    }
    return WhisperModel(std::move(w), std::move(tok), std::move(rules));
  }

  // A whisper.cpp ggml file (f32/f16). Its vocabulary has no config, so the suppressed
  // tokens are the special ones only (openai-whisper's non-speech symbol list needs a BPE
  // encoder, which this example does not have).
  static WhisperModel load_ggml_file(const std::string& path) {
    const GgmlModel g = load_ggml(path);
    WhisperWeights w = weights_from_ggml(g);
    Tokenizer tok = Tokenizer::from_raw_bytes(g.vocabulary, g.hparams.n_vocab);
    DecodingRules rules = default_rules(tok);
    return WhisperModel(std::move(w), std::move(tok), std::move(rules));
  }

  // Rules from the tokenizer alone: suppress the task/special tokens and, at the first
  // step, " " and <|endoftext|>.
  static DecodingRules default_rules(const Tokenizer& tok) {
    const SpecialTokens& s = tok.special();
    DecodingRules r;
    r.prompt = {s.sot, s.no_timestamps};
    r.eot = s.eot;
    for (int id : {s.translate, s.transcribe, s.sot, s.start_of_prev, s.start_of_lm, s.no_speech})
      if (id >= 0) r.suppress.push_back(id);
    if (const auto blank = tok.find(" ")) r.suppress_at_begin.push_back(*blank);
    r.suppress_at_begin.push_back(s.eot);
    return r;
  }

  const WhisperWeights& weights() const { return w_; }
  const WhisperDims& dims() const { return w_.dims; }
  const Tokenizer& tokenizer() const { return tok_; }
  const DecodingRules& rules() const { return rules_; }
  const RowMatrixXf& mel_filters() const { return filters_; }

  // One 30 s window (n_mels, 3000) -> audio features (n_audio_ctx, d).
  RowMatrixXf encode(const RowMatrixXf& mel_window) const { return whisper::encode(w_, mel_window); }

  // Greedy decoding of one window; returns the sampled tokens without prompt and eot.
  std::vector<int> greedy_decode(const RowMatrixXf& audio_features) const {
    DecoderState state = begin_decoding(w_, audio_features);
    std::vector<int> out;
    RowVectorXf logits = decode_step(w_, state, rules_.prompt);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (;;) {
      for (int id : rules_.suppress) logits[id] = neg_inf;
      if (out.empty())
        for (int id : rules_.suppress_at_begin) logits[id] = neg_inf;
      Eigen::Index best = 0;
      logits.maxCoeff(&best);  // first maximum, like torch.argmax
      const int token = static_cast<int>(best);
      if (token == rules_.eot) break;
      out.push_back(token);
      if (rules_.prompt.size() + out.size() >= static_cast<std::size_t>(rules_.max_length)) break;  // context full
      const int next[] = {token};
      logits = decode_step(w_, state, next);
    }
    return out;
  }

  // 16 kHz mono samples -> text (leading space kept, as Whisper produces it).
  Transcript transcribe(std::span<const float> samples) const {
    using clock = std::chrono::steady_clock;
    auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    Transcript t;
    auto t0 = clock::now();
    const WhisperSpectrogram spec = whisper_spectrogram(samples, filters_);
    t.mel_ms = ms(t0, clock::now());
    for (int seek : spec.window_starts()) {
      t0 = clock::now();
      const RowMatrixXf features = encode(spec.window(seek));
      const auto t1 = clock::now();
      const std::vector<int> tokens = greedy_decode(features);
      t.encode_ms += ms(t0, t1);
      t.decode_ms += ms(t1, clock::now());
      t.text += tok_.decode(tokens);
      t.tokens.insert(t.tokens.end(), tokens.begin(), tokens.end());
      ++t.windows;
    }
    return t;
  }

 private:
  WhisperWeights w_;
  Tokenizer tok_;
  DecodingRules rules_;
  RowMatrixXf filters_;
};

}  // namespace polyattn::whisper
