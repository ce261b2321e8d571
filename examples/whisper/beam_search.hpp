// Beam search over one audio window, with CTranslate2's rules (src/decoding.cc, BeamSearch::search),
// which are what faster-whisper users get. Only the choice of tokens lives here: the caller feeds
// the beams' tokens through the decoder, turns each beam's logits into log-probabilities (with the
// suppression rules, WhisperModel::log_probs) and moves the decoder sequences as advance() says.
//
//   BeamSearch search({.beam_size = 5}, eot);     // one beam, no tokens
//   while (!search.finished()) {
//     // rows: (search.beams().size(), n_vocab), row b the log-probs after beam b's tokens
//     std::vector<int> parents = search.advance(rows);
//     // beam b now extends old beam parents[b] by search.beams()[b].tokens.back()
//   }
//   search.best().tokens;
//
// Each step ranks beam_size * 2 candidates (beam, token) by cumulative log-prob over all beams.
// The first beam_size are the next beams, except that a candidate ending in <|endoftext|> (or any
// candidate at the last step) becomes a finished hypothesis and its place goes to the next
// candidate not ending in <|endoftext|>. The search ends when round(beam_size * patience)
// hypotheses have finished (with length_penalty 0: when the best beam finished), or at the last
// step. Hypotheses are ranked by log-prob / length^length_penalty, length without <|endoftext|>.
//
// Where openai-whisper's BeamSearchDecoder (decoding.py) differs: it draws candidates from the top
// beam_size + 1 tokens of each beam (not the top beam_size * 2 over all beams) and registers every
// finished candidate ranked above the beam_size-th live one, up to round(beam_size * patience)
// in all (not only those among the first beam_size, and without a cap); with length_penalty set it divides by ((5 + length) / 6)^length_penalty (the
// default, unset, divides by the length, as here at 1); at the sample length it adds live beams
// only when fewer than beam_size hypotheses finished. Both count <|endoftext|> in the log-prob
// and not in the length.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "error.hpp"

namespace polyattn::whisper {

struct BeamSearchOptions {
  int beam_size = 5;            // 1: greedy (CTranslate2's GreedySearch gives the same tokens)
  float patience = 1.0f;        // the search ends after round(beam_size * patience) hypotheses; beam_size > 1 only
  float length_penalty = 1.0f;  // hypothesis score: log-prob / length^length_penalty
  int max_new_tokens = 224;     // sampled tokens, <|endoftext|> included (Whisper: n_text_ctx / 2)
  // temperature > 0: no beams but best_of independent samples, each token drawn from
  // softmax(log-probs / temperature) (openai-whisper's and faster-whisper's fallback decoding);
  // the draws come from `seed`, so a run repeats exactly.
  float temperature = 0.0f;
  int best_of = 5;
  std::uint64_t seed = 0;
};

class BeamSearch {
 public:
  struct Beam {
    std::vector<int> tokens;  // sampled so far; the last one is fed at the next step
    float log_prob = 0.0f;    // cumulative
  };
  struct Hypothesis {
    std::vector<int> tokens;  // without <|endoftext|>
    float log_prob = 0.0f;    // cumulative, <|endoftext|> included
    float score = 0.0f;       // log_prob / length^length_penalty
    bool ended = false;       // false: stopped at max_new_tokens without <|endoftext|>
  };

  BeamSearch(const BeamSearchOptions& opt, int eot) : opt_(opt), eot_(eot), beams_(1), rng_(opt.seed) {
    if (opt.beam_size < 1) throw Error("beam search: beam_size must be >= 1, got " + std::to_string(opt.beam_size));
    if (!(opt.patience > 0.0f)) throw Error("beam search: patience must be > 0, got " + std::to_string(opt.patience));
    if (opt.max_new_tokens < 1) throw Error("beam search: max_new_tokens must be >= 1, got " + std::to_string(opt.max_new_tokens));
    if (!(opt.temperature >= 0.0f)) throw Error("beam search: temperature must be >= 0, got " + std::to_string(opt.temperature));
    if (opt.temperature > 0.0f && opt.best_of < 1) throw Error("beam search: best_of must be >= 1, got " + std::to_string(opt.best_of));
    // CTranslate2 runs GreedySearch for beam_size 1, which stops at the first hypothesis.
    wanted_ = opt.beam_size == 1 ? 1 : std::max<std::size_t>(1, std::size_t(std::lround(float(opt.beam_size) * opt.patience)));
  }

  const std::vector<Beam>& beams() const { return beams_; }
  int step() const { return step_; }  // tokens sampled per beam so far
  bool finished() const { return finished_; }
  // The best hypothesis; only once finished().
  const Hypothesis& best() const {
    if (!finished_) throw Error("beam search: best() before the search finished");
    return finished_hyps_.front();
  }
  // Every finished hypothesis, best first; only once finished().
  const std::vector<Hypothesis>& hypotheses() const { return finished_hyps_; }

  // log_probs: (beams().size(), n_vocab), row b the next-token log-probabilities of beam b.
  // Returns, for each beam after the step, the index of the beam it extends (empty once finished).
  template <class Rows>
  std::vector<int> advance(const Rows& log_probs) {
    if (finished_) throw Error("beam search: advance() after the search finished");
    if (static_cast<std::size_t>(log_probs.rows()) != beams_.size())
      throw Error("beam search: " + std::to_string(log_probs.rows()) + " rows of log-probs for " + std::to_string(beams_.size()) +
                  " beams");
    if (opt_.temperature > 0.0f) return advance_samples(log_probs);
    const int beam = opt_.beam_size;
    const std::vector<Candidate> cand = top_candidates(log_probs, std::size_t(2 * beam));
    const bool last_step = step_ + 1 == opt_.max_new_tokens;
    std::vector<Beam> next;
    std::vector<int> parents;
    std::size_t secondary = std::size_t(beam);  // the next candidate that may replace a finished one
    for (std::size_t k = 0; k < std::size_t(beam) && k < cand.size(); ++k) {
      std::size_t chosen = k;
      if (cand[k].token == eot_ || last_step) {
        if (k == 0) top_beam_finished_ = true;
        finish(cand[k]);
        for (std::size_t j = secondary; j < cand.size(); ++j)
          if (cand[j].token != eot_) {
            chosen = j;
            secondary = j + 1;
            break;
          }
      }
      const Candidate& c = cand[chosen];
      Beam b{beams_[std::size_t(c.beam)].tokens, c.log_prob};
      b.tokens.push_back(c.token);
      next.push_back(std::move(b));
      parents.push_back(c.beam);
    }
    ++step_;
    const bool early_exit = opt_.length_penalty == 0.0f;  // CTranslate2: no penalty, so the best beam's hypothesis wins
    if (last_step || (early_exit ? top_beam_finished_ && !finished_hyps_.empty() : finished_hyps_.size() >= wanted_)) {
      finalize();
      return {};
    }
    beams_ = std::move(next);
    return parents;
  }

 private:
  struct Candidate {
    int beam = 0, token = 0;
    float log_prob = 0.0f;
  };

  // Sampling: each live sample draws its next token (the first step draws best_of from the one
  // beam); a sample that draws <|endoftext|>, or reaches the sample length, is a hypothesis.
  // The log-prob kept is the untempered one, as openai-whisper and CTranslate2 keep.
  template <class Rows>
  std::vector<int> advance_samples(const Rows& log_probs) {
    const bool last_step = step_ + 1 == opt_.max_new_tokens;
    const int draws = step_ == 0 ? opt_.best_of : 1;
    std::vector<Beam> next;
    std::vector<int> parents;
    for (Eigen::Index b = 0; b < log_probs.rows(); ++b)
      for (int d = 0; d < draws; ++d) {
        const int token = draw(log_probs.row(b));
        const Candidate c{int(b), token, beams_[std::size_t(b)].log_prob + log_probs(b, token)};
        if (token == eot_ || last_step) {
          finish(c);
          continue;
        }
        Beam beam{beams_[std::size_t(b)].tokens, c.log_prob};
        beam.tokens.push_back(token);
        next.push_back(std::move(beam));
        parents.push_back(int(b));
      }
    ++step_;
    if (next.empty()) {
      finalize();
      return {};
    }
    beams_ = std::move(next);
    return parents;
  }

  // A token drawn from softmax(row / temperature), by inverting its cumulative sum at a uniform
  // draw of 53 bits (the same on every platform, unlike std::uniform_real_distribution).
  template <class Row>
  int draw(const Row& row) {
    if (row.hasNaN()) throw Error("beam search: a log-prob is NaN");
    const float inv_t = 1.0f / opt_.temperature;
    const float max = (row.array() * inv_t).maxCoeff();
    if (!std::isfinite(max)) throw Error("beam search: every token is suppressed");
    // The weights exp(row / T - max) in float, in Eigen's vectorised exp (a scalar exp in double
    // per token was most of a sampled step's time over 51864 tokens: two thirds of the fallback
    // test under ASan); summed in double. A weight below float's range (row / T more than 103
    // below the best, a chance under 1e-45) is 0: never drawn.
    weights_ = (row.array() * inv_t - max).exp();
    double total = 0.0;
    for (Eigen::Index v = 0; v < weights_.size(); ++v) total += weights_[v];
    const double u = double(rng_() >> 11) * 0x1.0p-53 * total;
    double sum = 0.0;
    int last_allowed = 0;
    for (Eigen::Index v = 0; v < weights_.size(); ++v) {
      const double w = weights_[v];
      if (w == 0.0) continue;
      sum += w;
      last_allowed = int(v);
      if (u < sum) return int(v);
    }
    return last_allowed;  // u at the very top, past the rounded sum
  }

  // The n best (beam, token) by cumulative log-prob, best first; ties go to the lower beam, then
  // the lower token id (as argmax would). A bounded min-heap: most entries are rejected at once.
  template <class Rows>
  std::vector<Candidate> top_candidates(const Rows& log_probs, std::size_t n) const {
    auto better = [](const Candidate& a, const Candidate& b) {
      if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
      return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
    };
    std::vector<Candidate> heap;  // worst at the front
    heap.reserve(n + 1);
    for (Eigen::Index b = 0; b < log_probs.rows(); ++b) {
      const float base = beams_[std::size_t(b)].log_prob;
      for (Eigen::Index v = 0; v < log_probs.cols(); ++v) {
        const float lp = log_probs(b, v);
        if (std::isnan(lp)) throw Error("beam search: a log-prob is NaN");
        const Candidate c{int(b), int(v), base + lp};
        if (heap.size() == n && !better(c, heap.front())) continue;
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), better);
        if (heap.size() > n) {
          std::pop_heap(heap.begin(), heap.end(), better);
          heap.pop_back();
        }
      }
    }
    std::sort(heap.begin(), heap.end(), better);
    return heap;
  }

  void finish(const Candidate& c) {
    Hypothesis h{beams_[std::size_t(c.beam)].tokens, c.log_prob, 0.0f, c.token == eot_};
    if (!h.ended) h.tokens.push_back(c.token);
    finished_hyps_.push_back(std::move(h));
  }

  // Final scores, best first (CTranslate2: finalize_result); equal scores keep their finishing order.
  void finalize() {
    for (Hypothesis& h : finished_hyps_)
      h.score = h.log_prob / std::pow(static_cast<float>(h.tokens.size()), opt_.length_penalty);
    std::stable_sort(finished_hyps_.begin(), finished_hyps_.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    beams_.clear();
    finished_ = true;
  }

  BeamSearchOptions opt_;
  int eot_;
  std::size_t wanted_ = 1;
  std::vector<Beam> beams_;
  std::vector<Hypothesis> finished_hyps_;
  int step_ = 0;
  bool top_beam_finished_ = false;
  bool finished_ = false;
  std::mt19937_64 rng_;  // temperature > 0 only
  Eigen::Array<float, 1, Eigen::Dynamic> weights_;  // draw's scratch: one weight per token
};

}  // namespace polyattn::whisper
