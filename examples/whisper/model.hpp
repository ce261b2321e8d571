// WhisperModel: weights + tokenizer + decoding rules, and transcription of whole
// recordings. Decoding follows CTranslate2 (as faster-whisper runs it) for English-only models
// without timestamps: prompt <|startoftranscript|><|notimestamps|>; at the first sampled token
// suppress " " and <|endoftext|> (suppress_blank); always suppress the config's suppress_ids;
// greedy or beam search (beam_search.hpp) over the log-softmax of what is left; a window ends at
// <|endoftext|> or after 224 sampled tokens (half the text context; the window is then reported
// as cut: Transcript::cut_windows). Audio longer than 30 s is split into consecutive 30 s
// windows decoded independently (no timestamps, so no seeking by segment ends), and their texts
// are concatenated.
//
// transcribe<Policies>(files) decodes the windows of several recordings as one batch of up
// to `batch` windows, each with up to beam_size sequences (its beams, which share the window's
// cross cache): a window joins when a slot is free (encoded, its cross caches filled, its prompt
// prefilled) and leaves when its search ends, so the sequences have different lengths.
// Windows do not interact, so the tokens of a file do not depend on the batch.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "beam_search.hpp"
#include "ct2_model.hpp"
#include "decoding_rules.hpp"
#include "decoder.hpp"
#include "encoder.hpp"
#include "error.hpp"
#include "ggml_model.hpp"
#include "mel.hpp"
#include "policies.hpp"
#include "timestamp_rules.hpp"
#include "tokenizer.hpp"
#include "transcript.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

struct TranscribeOptions {
  int batch = 16;   // sequences (30 s windows) decoded at once
  // Threads of the attention executors, lent from the products' OpenMP team (openmp_team.hpp);
  // 0: Eigen's count (Eigen::nbThreads(), which the CLI's --threads sets).
  int threads = 0;
  // Beam search with CTranslate2's rules (beam_search.hpp); 1 is greedy decoding. The CLI's
  // default is 5, as faster-whisper's.
  int beam_size = 1;
  float patience = 1.0f;        // beam_size > 1: stop after round(beam_size * patience) hypotheses
  float length_penalty = 1.0f;  // hypotheses ranked by log-prob / length^length_penalty
  // Where the encoder's and decoder's products run (dense.hpp); nullptr: default_dense(). An engine
  // that keeps weight copies (CublasDense) must serve one call only: the decoder built by the call
  // owns converted weights, freed when it ends (Backend::transcribe makes one engine per call).
  Dense* dense = nullptr;
  // Timestamps on: openai-whisper's long-form algorithm (timestamp tokens and rules, segments,
  // each window starting where the last complete segment ended, the previous text as prompt).
  // Off: consecutive 30 s windows decoded independently with <|notimestamps|>, one segment each.
  bool timestamps = false;
  bool condition_on_previous_text = true;  // timestamps on: the text so far (up to 223 tokens) as prompt
  // Fallback: a window is decoded at temperatures[0]; while its text repeats itself (compression
  // ratio above the threshold) or its average log-prob is below the threshold, unless it looks
  // like silence, again at the next temperature (> 0: best_of seeded samples, no beams).
  // {0} decodes each window once; the CLI's default is openai-whisper's list.
  std::vector<float> temperatures = {0.0f};
  float compression_ratio_threshold = 2.4f;
  float log_prob_threshold = -1.0f;
  float no_speech_threshold = 0.6f;  // a window this likely silent is skipped when its log-prob is low too
  int best_of = 5;
  std::uint64_t seed = 0;
  // Called when a window of file `file` is done (kept, not retried): seconds of its audio
  // transcribed so far, and its length in seconds.
  std::function<void(std::size_t, double, double)> on_window{};
};

// The recordings of one transcribe() call, each read when the batch first needs it, so that a
// long list of files is never in memory at once: `count` files; read(f, buffer) returns file f's
// 16 kHz mono samples, as a view of memory the caller keeps or of `buffer`, which it may fill
// (transcribe frees it once the file's spectrogram is made). Files are read in order, once each.
struct AudioSource {
  std::size_t count = 0;
  std::function<std::span<const float>(std::size_t file, std::vector<float>& buffer)> read;

  // Recordings the caller holds (no copy): they must outlive the call.
  static AudioSource of(std::span<const std::vector<float>> files) {
    return {files.size(), [files](std::size_t f, std::vector<float>&) { return std::span<const float>(files[f]); }};
  }
};

// Time and memory of one transcribe() call.
struct TranscribeReport {
  std::string policies;  // DecoderPolicies::name()
  std::string dense;     // the Dense engine's name: where the products ran
  std::vector<std::string> notes;  // what the policies' weight conversions measured or decided
  double prepare_ms = 0;  // building the decoder policies (weight conversions, cache allocation)
  double mel_ms = 0, encode_ms = 0;
  double decode_ms = 0;     // decoder work: opening windows (cross caches), prefill, steps
  double cross_open_ms = 0; // the part of decode_ms spent opening windows (handing the encoder output to the cross cache)
  // The part of decode_ms spent in prefill (the prompt of the joining windows). It includes the
  // baseline and K-only cross K/V projections: those happen at each layer's first attend, not at
  // open. decode_ms - cross_open_ms - prefill_ms is the time of the decode steps alone.
  double prefill_ms = 0;
  std::size_t step_tokens = 0;  // tokens fed through the decode steps: one per live sequence per step
  std::size_t text_tokens = 0;  // sampled tokens without eot, over all windows
  int windows = 0;    // window decodings, retries at a higher temperature included
  int fallbacks = 0;  // the retries
  int decode_steps = 0;
  int max_batch = 0;      // windows decoded at once
  int max_sequences = 0;  // decoder sequences (beams of those windows) at once
  int windows_cut = 0;  // windows cut at the text context, over all files (Transcript::cut_windows)
  int max_spectrograms = 0;  // files whose log-mel spectrogram was held at once (transcribe.hpp)
  DecoderCacheUse peak;  // self and cross each at their largest bytes_held during decoding
};

struct Transcription {
  std::vector<Transcript> files;
  TranscribeReport report;
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
    rules_.sample_len = std::min(rules_.sample_len, w_.dims.n_text_ctx / 2);
    if (rules_.prompt.empty() || static_cast<int>(rules_.prompt.size()) >= rules_.max_length)
      throw ModelError("prompt of " + std::to_string(rules_.prompt.size()) + " tokens does not fit the context");
    if (max_new_tokens() < 1) throw ModelError("the text context of " + std::to_string(w_.dims.n_text_ctx) + " tokens leaves none to sample");
  }

  // A CTranslate2 model directory (model.bin, config.json, vocabulary.*).
  static WhisperModel load_ct2(const std::filesystem::path& dir) {
    Ct2ModelDir m = load_ct2_model_dir(dir);
    WhisperWeights w = weights_from_ct2(std::move(m.model));  // frees the file's tensors as it converts them
    Tokenizer tok = Tokenizer::from_byte_level(m.vocabulary);
    DecodingRules rules = default_rules(tok);
    apply_ct2_config(m.config, (dir / "config.json").string(), rules);
    return WhisperModel(std::move(w), std::move(tok), std::move(rules));
  }

  // A whisper.cpp ggml file (f32/f16). Its vocabulary has no config, so the suppressed
  // tokens are the special ones only (openai-whisper's non-speech symbol list needs a BPE
  // encoder, which this example does not have).
  static WhisperModel load_ggml_file(const std::string& path) {
    GgmlModel g = load_ggml(path);
    Tokenizer tok = Tokenizer::from_raw_bytes(g.vocabulary, g.hparams.n_vocab);
    WhisperWeights w = weights_from_ggml(std::move(g));  // frees the file's tensors as it converts them
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
  RowMatrixXf encode(const RowMatrixXf& mel_window, Dense& dense = default_dense()) const {
    return whisper::encode(w_, mel_window, dense);
  }

  // Transcribes recordings (16 kHz mono samples each) with the decoder policies `Policies`
  // (policies.hpp); texts keep Whisper's leading space.
  // Defined in transcribe.hpp and compiled once per combination: the CPU ones in
  // transcribe_cpu.cpp (explicit instantiations), the CUDA ones where nvcc compiles them.
  // Each file is read when the batch first needs it (AudioSource).
  template <class Policies = DefaultPolicies>
  Transcription transcribe(const AudioSource& audio, const TranscribeOptions& opt = {}) const;

  // Recordings the caller holds.
  template <class Policies = DefaultPolicies>
  Transcription transcribe(std::span<const std::vector<float>> files, const TranscribeOptions& opt = {}) const {
    return transcribe<Policies>(AudioSource::of(files), opt);
  }

  // One recording.
  template <class Policies = DefaultPolicies>
  Transcript transcribe(std::span<const float> samples, const TranscribeOptions& opt = {}) const {
    const AudioSource one{1, [samples](std::size_t, std::vector<float>&) { return samples; }};
    return transcribe<Policies>(one, opt).files.front();
  }

  // One row of logits -> next-token log-probabilities, in place: suppressed tokens get -inf
  // (at every step, and at the first sampled token suppress_at_begin too), with `timestamps` the
  // timestamp rules over `sampled` (the window's tokens so far), then log-softmax, in that order
  // as in CTranslate2.
  void log_probs(Eigen::Ref<RowVectorXf> logits, std::span<const int> sampled, bool timestamps = false) const {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int id : rules_.suppress) logits[id] = neg_inf;
    if (sampled.empty())
      for (int id : rules_.suppress_at_begin) logits[id] = neg_inf;
    if (timestamps) apply_timestamp_rules(logits, sampled, timestamp_tokens());
    const float max = logits.maxCoeff();
    const float log_sum = max + std::log((logits.array() - max).exp().sum());
    logits.array() -= log_sum;
  }

  // Sampled tokens one window may hold, <|endoftext|> included: the sample length (half the
  // text context, as openai-whisper and CTranslate2), within what the context leaves after the
  // prompt (by default rules().prompt).
  int max_new_tokens(int prompt_tokens = -1) const {
    if (prompt_tokens < 0) prompt_tokens = static_cast<int>(rules_.prompt.size());
    return std::min(rules_.sample_len, rules_.max_length - prompt_tokens + 1);
  }

  // The timestamp tokens (<|0.00|> .. <|30.00|>) and the first one allowed at most (<|1.00|>),
  // for the timestamp rules; throws when the vocabulary has none.
  TimestampTokens timestamp_tokens() const {
    const SpecialTokens& s = tok_.special();
    const int n_stamps = w_.dims.n_audio_ctx + 1;  // one per 20 ms of the 30 s window, both ends
    if (s.timestamp_begin < 0 || s.no_timestamps < 0 || s.timestamp_begin + n_stamps > w_.dims.n_vocab)
      throw ModelError("this vocabulary has no timestamp tokens: transcribe with timestamps off");
    return {s.eot, s.no_timestamps, s.timestamp_begin, s.timestamp_begin + n_stamps - 1, s.timestamp_begin + 50};
  }

 private:
  WhisperWeights w_;
  Tokenizer tok_;
  DecodingRules rules_;
  RowMatrixXf filters_;
};

}  // namespace polyattn::whisper
