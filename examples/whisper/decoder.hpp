// Whisper's text decoder over a batch of sequences (one per audio window): token + learned
// positional embeddings, pre-LayerNorm blocks of causal self-attention, cross-attention over
// the encoder output and MLP; final LayerNorm and logits through the tied token embedding.
// Both attentions are compile-time policies (self_attention.hpp, cross_attention.hpp):
//
//   Decoder<DecoderPolicies<SelfAttention<self_kind::SlimK, Nhd>, CrossCacheAttention<cross::SharedE>>> dec(
//       weights, {.max_sequences = 16});         // converts the weights the policies need
//   int seq = dec.open(audio_features);          // cross cache filled for the window
//   RowMatrixXf logits = dec.prefill(seqs, prompt);   // (B, n_vocab), after the last prompt token
//   logits = dec.decode(seqs, next_tokens);      // one token per sequence
//   int beam = dec.fork(seq);                    // holds seq's tokens, reads seq's cross cache
//   dec.close(seq);
//
// Sequences are independent: they may have different lengths and join or leave between steps.
// A fork (a beam) shares its parent's audio: one cross cache per window however many beams read
// it (DecoderConfig::max_audio windows, max_sequences sequences), freed with its last sequence.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "cross_attention.hpp"
#include "onednn_dense.hpp"
#include "error.hpp"
#include "layers.hpp"
#include "matrix.hpp"
#include "self_attention.hpp"
#include "weights.hpp"

namespace polyattn::whisper {

// One combination of decoder policies; a compile-time type picked by name (policies.hpp).
template <SelfAttentionPolicy Self, CrossAttentionPolicy Cross>
struct DecoderPolicies {
  using self_policy = Self;
  using cross_policy = Cross;
  static std::string name() { return "--self " + Self::name() + " --cross " + Cross::name(); }
};

// The decoder's caches: self summed over layers, cross as the policy reports it.
struct DecoderCacheUse {
  CacheUse self, cross;
};

template <class Policies>
class Decoder {
 public:
  using Self = typename Policies::self_policy;
  using Cross = typename Policies::cross_policy;

  // The members that instantiate the policies are defined below the class, not inline, so that
  // `extern template class Decoder<P>` (policies.hpp) keeps every other translation unit from
  // compiling them again: transcribe_cpu.cpp compiles them once per combination.
  Decoder(const WhisperWeights& w, DecoderConfig cfg);

  // Opens a sequence for one audio window; features: (n_audio_ctx, d) from the encoder.
  int open(ConstMatrixRef audio_features);
  // A new sequence holding seq's tokens and reading seq's audio (a beam); throws, changing
  // nothing, when no sequence slot (or self-cache page) is free.
  int fork(int seq);
  void close(int seq);

  // Tokens fed to `seq` so far.
  int length(int seq) const {
    check_open(seq);
    return length_[std::size_t(seq)];
  }

  // Feeds the same chunk `tokens` to every sequence of `seqs` (Whisper's prompt), causally;
  // returns the logits after each sequence's last token: (B, n_vocab).
  RowMatrixXf prefill(std::span<const int> seqs, std::span<const int> tokens);

  // Feeds tokens[i] to seqs[i]; returns (B, n_vocab).
  RowMatrixXf decode(std::span<const int> seqs, std::span<const int> tokens);

  // What the policies' conversions measured or decided (per layer), for the CLI to print.
  std::vector<std::string> notes() const {
    std::vector<std::string> out;
    for (const Self& s : self_)
      if (std::string n = s.note(); !n.empty()) out.push_back("self:  " + n);
    for (const std::string& n : cross_.notes()) out.push_back("cross: " + n);
    return out;
  }

  DecoderCacheUse cache_use() const {
    DecoderCacheUse u{{}, cross_.cache_use(readers_)};
    for (const Self& s : self_) {
      const CacheUse l = s.cache_use();
      u.self.bytes_per_token += l.bytes_per_token;
      u.self.bytes_held += l.bytes_held;
      u.self.bytes_if_copied += l.bytes_if_copied;
      u.self.bytes_allocated += l.bytes_allocated;
      u.self.tokens = l.tokens;  // the same in every layer
    }
    return u;
  }

 private:
  static const DecoderConfig& checked(const DecoderConfig& cfg) {
    if (cfg.max_sequences < 1) throw Error("decoder: max_sequences must be >= 1, got " + std::to_string(cfg.max_sequences));
    if (cfg.max_audio < 0) throw Error("decoder: max_audio must be >= 0, got " + std::to_string(cfg.max_audio));
    return cfg;
  }

  void check_open(int seq) const {
    if (seq < 0 || seq >= static_cast<int>(length_.size()) || length_[std::size_t(seq)] < 0)
      throw Error("decoder: sequence " + std::to_string(seq) + " is not open");
  }

  // Before a cache is touched: open() and fork() need a free sequence slot.
  void check_free_slot(const std::string& what) const {
    if (std::find(length_.begin(), length_.end(), -1) == length_.end())
      throw CapacityError("decoder: cannot " + what + ": all " + std::to_string(length_.size()) + " sequence slots are open");
  }

  // Everything that can fail is checked here, before any cache is written.
  void check(std::span<const int> seqs, std::span<const int> tokens, int n, const char* what) const {
    const WhisperDims& d = w_->dims;
    if (seqs.empty() || n < 1) throw Error(std::string("decoder: ") + what + " needs at least one sequence and one token");
    std::vector<int> sorted(seqs.begin(), seqs.end());
    std::sort(sorted.begin(), sorted.end());
    if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
      throw Error("decoder: sequence " + std::to_string(*dup) + " appears twice in one " + what);
    for (int seq : seqs) {
      check_open(seq);
      if (length_[std::size_t(seq)] + n > d.n_text_ctx)
        throw Error("decoder: sequence " + std::to_string(seq) + " holds " + std::to_string(length_[std::size_t(seq)]) +
                    " tokens; " + std::to_string(n) + " more would exceed the text context of " +
                    std::to_string(d.n_text_ctx));
    }
    for (int t : tokens)
      if (t < 0 || t >= d.n_vocab)
        throw Error("decoder: token id " + std::to_string(t) + " is not in [0, " + std::to_string(d.n_vocab) + ")");
  }

  // token(p, i): token p of sequence i's chunk of n. Hidden states are position-major,
  // row p * B + i, so that position p of every sequence is one (B, d) block for
  // cross-attention and the logits.
  template <class TokenAt>
  RowMatrixXf forward(std::span<const int> seqs, Eigen::Index n, TokenAt token);

  const WhisperWeights* w_;
  Dense* dense_;
  Cross cross_;
  std::vector<Self> self_;        // one per decoder layer
  std::vector<int> length_;       // per sequence slot; -1 = closed
  std::vector<int> audio_of_;     // per sequence slot: its cross-cache sequence (its audio window)
  std::vector<int> readers_;      // per cross-cache sequence: the open sequences reading it
  RowMatrixXf x_, sub_;           // (n * B, d): hidden states, a sub-layer's output
};

template <class Policies>
Decoder<Policies>::Decoder(const WhisperWeights& w, DecoderConfig cfg)
    : w_(&w),
      dense_(cfg.dense ? cfg.dense : &default_dense()),
      cross_(w, checked(cfg)),
      length_(std::size_t(cfg.max_sequences), -1),
      audio_of_(std::size_t(cfg.max_sequences), -1),
      readers_(std::size_t(cfg.audio_slots()), 0) {
  self_.reserve(w.decoder.size());
  for (std::size_t l = 0; l < w.decoder.size(); ++l) self_.emplace_back(w.decoder[l], w.dims, cfg, static_cast<int>(l));
}

template <class Policies>
int Decoder<Policies>::open(ConstMatrixRef audio_features) {
  check_free_slot("open a sequence");
  const int audio = cross_.open(audio_features);  // throws, changing nothing, when every window slot is open
  int seq = -1;
  for (Self& s : self_)  // every layer hands out the same free slot (their caches open and close together)
    if (const int opened = s.open_sequence(); seq < 0)
      seq = opened;
    else if (opened != seq)
      throw Error("decoder: the self-attention layers disagree on the sequence slot");
  length_[std::size_t(seq)] = 0;
  audio_of_[std::size_t(seq)] = audio;
  readers_[std::size_t(audio)] = 1;
  return seq;
}

template <class Policies>
int Decoder<Policies>::fork(int seq) {
  check_open(seq);
  check_free_slot("fork sequence " + std::to_string(seq));
  std::size_t forked = 0;
  int child = -1;
  try {
    for (; forked < self_.size(); ++forked) {
      const int c = self_[forked].fork_sequence(seq);  // throws, changing that layer's cache not at all
      if (child >= 0 && c != child) {
        self_[forked].close_sequence(c);
        throw Error("decoder: the self-attention layers disagree on the sequence slot");
      }
      child = c;
    }
  } catch (...) {  // a layer's page pool ran out: the layers already forked let go again
    for (std::size_t l = 0; l < forked; ++l) self_[l].close_sequence(child);
    throw;
  }
  length_[std::size_t(child)] = length_[std::size_t(seq)];
  audio_of_[std::size_t(child)] = audio_of_[std::size_t(seq)];
  ++readers_[std::size_t(audio_of_[std::size_t(seq)])];
  return child;
}

template <class Policies>
void Decoder<Policies>::close(int seq) {
  check_open(seq);
  for (Self& s : self_) s.close_sequence(seq);
  const int audio = audio_of_[std::size_t(seq)];
  if (--readers_[std::size_t(audio)] == 0) cross_.close(audio);
  length_[std::size_t(seq)] = -1;
  audio_of_[std::size_t(seq)] = -1;
}

template <class Policies>
RowMatrixXf Decoder<Policies>::prefill(std::span<const int> seqs, std::span<const int> tokens) {
  check(seqs, tokens, static_cast<int>(tokens.size()), "prefill");
  return forward(seqs, static_cast<Eigen::Index>(tokens.size()), [&](Eigen::Index p, Eigen::Index) { return tokens[std::size_t(p)]; });
}

template <class Policies>
RowMatrixXf Decoder<Policies>::decode(std::span<const int> seqs, std::span<const int> tokens) {
  if (tokens.size() != seqs.size())
    throw Error("decoder: decode got " + std::to_string(tokens.size()) + " tokens for " + std::to_string(seqs.size()) +
                " sequences (one each)");
  check(seqs, tokens, 1, "decode");
  return forward(seqs, 1, [&](Eigen::Index, Eigen::Index i) { return tokens[std::size_t(i)]; });
}

template <class Policies>
template <class TokenAt>
RowMatrixXf Decoder<Policies>::forward(std::span<const int> seqs, Eigen::Index n, TokenAt token) {
  const WhisperDims& d = w_->dims;
  const auto B = static_cast<Eigen::Index>(seqs.size());
  const Eigen::Index D = d.n_text_state;
  x_.resize(n * B, D);
  for (Eigen::Index p = 0; p < n; ++p)
    for (Eigen::Index i = 0; i < B; ++i) {
      auto row = x_.row(p * B + i);
      w_->token_embedding.row_into(token(p, i), row);
      row += w_->decoder_positions.row(length_[std::size_t(seqs[std::size_t(i)])] + p);
    }
  std::vector<int> audio;  // the cross-cache sequence of each of seqs (beams of one window share it)
  for (int seq : seqs) audio.push_back(audio_of_[std::size_t(seq)]);
  sub_.resize(n * B, D);
  for (std::size_t l = 0; l < w_->decoder.size(); ++l) {
    const DecoderBlock& b = w_->decoder[l];
    if (n == 1)
      self_[l].decode(seqs, layer_norm(x_, b.self_ln), sub_);
    else
      self_[l].prefill(seqs, layer_norm(x_, b.self_ln), sub_);
    x_ += sub_;
    const RowMatrixXf h = layer_norm(x_, b.cross_ln);
    for (Eigen::Index p = 0; p < n; ++p) cross_.attend(static_cast<int>(l), audio, h.middleRows(p * B, B), sub_.middleRows(p * B, B));
    x_ += sub_;
    RowMatrixXf hidden = dense_->linear(layer_norm(x_, b.mlp_ln), b.fc1);
    gelu_inplace(hidden);
    x_ += dense_->linear(hidden, b.fc2);
  }
  for (int seq : seqs) length_[std::size_t(seq)] += static_cast<int>(n);
  const RowMatrixXf last = layer_norm(x_.bottomRows(B), w_->decoder_ln);  // (B, D): position n - 1
  return dense_->project(last, w_->token_embedding);  // (B, n_vocab): tied output projection
}

}  // namespace polyattn::whisper
