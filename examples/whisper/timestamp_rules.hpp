// Whisper's timestamp rules, as CTranslate2 applies them (src/models/whisper.cc,
// ApplyTimestampRules; openai-whisper's ApplyTimestampRules has the same effect), on one
// beam's logits after the suppression rules and before the log-softmax. `sampled` is what the
// beam sampled so far in this window (no prompt).
//
//   - <|notimestamps|> never.
//   - First token: a timestamp, at most max_initial (<|1.00|>: faster-whisper's
//     max_initial_timestamp of 1 s).
//   - Timestamps come in pairs (a segment's end and the next one's start), except directly
//     before <|endoftext|>: after a lone timestamp only a later-or-equal timestamp or
//     <|endoftext|>; after a pair, text.
//   - Timestamps never decrease: after text, only timestamps past the last one (so a segment
//     never has zero length).
//   - When the timestamps together are more likely than any single text token, a timestamp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include <Eigen/Core>

#include "matrix.hpp"

namespace polyattn::whisper {

struct TimestampTokens {
  int eot = -1;
  int no_timestamps = -1;
  int begin = -1;        // <|0.00|>
  int end = -1;          // the last timestamp, <|30.00|>
  int max_initial = -1;  // the latest timestamp the first token may be
};

inline void apply_timestamp_rules(Eigen::Ref<RowVectorXf> logits, std::span<const int> sampled, const TimestampTokens& t) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  auto forbid = [&](int from, int to_inclusive) {
    if (to_inclusive >= from) logits.segment(from, to_inclusive - from + 1).setConstant(neg_inf);
  };
  logits[t.no_timestamps] = neg_inf;
  if (sampled.empty()) {
    forbid(0, t.begin - 1);
    forbid(t.max_initial + 1, t.end);
    return;
  }
  const int last = sampled.back();
  if (last >= t.begin) {
    const int penultimate = sampled.size() >= 2 ? sampled[sampled.size() - 2] : last;
    if (penultimate >= t.begin) {  // a pair closed: text (or <|endoftext|>) next
      forbid(t.begin, t.end);
      return;
    }
    forbid(0, t.eot - 1);       // a lone timestamp: no text
    forbid(t.begin, last - 1);  // and no earlier timestamp
  } else {
    const auto previous = std::find_if(sampled.rbegin(), sampled.rend(), [&](int token) { return token >= t.begin; });
    if (previous != sampled.rend()) forbid(t.begin, *previous);
  }
  // Sum of the timestamps' probabilities against the most likely text token (log-softmax over
  // what is still allowed).
  const float max = logits.maxCoeff();
  if (!std::isfinite(max)) return;
  const float log_total = max + std::log((logits.array() - max).exp().sum());
  const auto stamps = logits.segment(t.begin, t.end - t.begin + 1);
  const float stamp_max = stamps.maxCoeff();
  const float text_max = logits.head(t.begin).maxCoeff() - log_total;
  if (!std::isfinite(stamp_max)) return;
  const float stamps_log_prob = stamp_max + std::log((stamps.array() - stamp_max).exp().sum()) - log_total;
  if (stamps_log_prob > text_max) forbid(0, t.begin - 1);
}

}  // namespace polyattn::whisper
