// WhisperModel::transcribe<Policies>: the batched decoding loop (model.hpp describes it). Its own
// header because each policy combination instantiates the whole decoder: the CPU combinations are
// compiled once, in transcribe_cpu.cpp, and every other translation unit links them; a
// translation unit that transcribes with a combination of its own (the CUDA ones) includes this.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "beam_search.hpp"
#include "model.hpp"

namespace polyattn::whisper {

template <class Policies>
Transcription WhisperModel::transcribe(std::span<const std::vector<float>> files, const TranscribeOptions& opt) const {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (opt.batch < 1) throw Error("transcribe: batch must be >= 1, got " + std::to_string(opt.batch));
  if (opt.beam_size < 1) throw Error("transcribe: beam_size must be >= 1, got " + std::to_string(opt.beam_size));
  const BeamSearchOptions search_opt{
      .beam_size = opt.beam_size, .patience = opt.patience, .length_penalty = opt.length_penalty, .max_new_tokens = max_new_tokens()};
  [[maybe_unused]] const BeamSearch refuses_bad_options_now(search_opt, rules_.eot);  // before anything is encoded
  Transcription out;
  TranscribeReport& r = out.report;
  r.policies = Policies::name();
  Dense& dense = opt.dense ? *opt.dense : eigen_dense();
  r.dense = dense.name();

  struct Window {
    std::size_t file;
    int seek;
    std::vector<int> tokens;  // the best hypothesis
    bool cut = false;         // ended at the sample length, not at <|endoftext|>
  };
  std::vector<WhisperSpectrogram> specs;
  std::vector<Window> windows;
  std::vector<int> windows_left;  // per file
  auto t0 = clock::now();
  for (std::size_t f = 0; f < files.size(); ++f) {
    specs.push_back(whisper_spectrogram(files[f], filters_));
    const std::vector<int> starts = specs.back().window_starts();
    for (int seek : starts) windows.push_back({f, seek, {}});
    windows_left.push_back(static_cast<int>(starts.size()));
  }
  r.mel_ms = ms(t0, clock::now());
  r.windows = static_cast<int>(windows.size());
  out.files.resize(files.size());
  for (std::size_t f = 0; f < files.size(); ++f) out.files[f].windows = windows_left[f];
  if (windows.empty()) return out;

  // A window being decoded: its search and the decoder sequence of each of its beams.
  struct Live {
    std::size_t window;
    BeamSearch search;
    std::vector<int> seqs;  // seqs[b]: beam b of search.beams()
  };
  const int windows_at_once = std::min<int>(opt.batch, r.windows);

  t0 = clock::now();
  Decoder<Policies> decoder(w_, {.max_sequences = windows_at_once * opt.beam_size, .max_audio = windows_at_once, .threads = opt.threads, .dense = &dense});
  r.prepare_ms = ms(t0, clock::now());
  r.notes = decoder.notes();
  std::vector<Live> live;
  std::size_t admitted = 0;
  auto note_memory = [&] {
    const DecoderCacheUse u = decoder.cache_use();
    if (u.self.bytes_held >= r.peak.self.bytes_held) r.peak.self = u.self;
    if (u.cross.bytes_held >= r.peak.cross.bytes_held) r.peak.cross = u.cross;
  };
  // One search step for each window of `batch`, whose beams' logits are consecutive rows of
  // `logits` in batch order. A window whose search ends closes its sequences and leaves `batch`;
  // the others move their sequences as the search says: a beam extended once keeps its sequence,
  // one extended k times forks k - 1 more, one not extended is closed (first, so its slot is free).
  auto advance = [&](std::vector<Live>& batch, RowMatrixXf& logits) {
    std::vector<Live> kept;
    Eigen::Index row = 0;
    for (Live& l : batch) {
      const auto n = static_cast<Eigen::Index>(l.seqs.size());
      for (Eigen::Index b = 0; b < n; ++b) log_probs(logits.row(row + b), l.search.step() == 0);
      const std::vector<int> parents = l.search.advance(logits.middleRows(row, n));
      row += n;
      if (l.search.finished()) {
        for (int seq : l.seqs) decoder.close(seq);
        Window& win = windows[l.window];
        const BeamSearch::Hypothesis& best = l.search.best();
        win.tokens = best.tokens;
        win.cut = !best.ended;
        const int total = out.files[win.file].windows;
        if (opt.on_window) opt.on_window(win.file, total - --windows_left[win.file], total);
        continue;
      }
      std::vector<int> uses(l.seqs.size(), 0);
      for (int p : parents) ++uses[std::size_t(p)];
      for (std::size_t b = 0; b < l.seqs.size(); ++b)
        if (uses[b] == 0) decoder.close(l.seqs[b]);
      std::vector<int> seqs(parents.size());
      std::vector<bool> taken(l.seqs.size(), false);
      for (std::size_t b = 0; b < parents.size(); ++b) {
        const auto p = std::size_t(parents[b]);
        seqs[b] = taken[p] ? decoder.fork(l.seqs[p]) : l.seqs[p];
        taken[p] = true;
      }
      l.seqs = std::move(seqs);
      kept.push_back(std::move(l));
    }
    batch = std::move(kept);
  };

  while (!live.empty() || admitted < windows.size()) {
    std::vector<Live> joining;
    std::vector<int> joining_seqs;
    while (live.size() + joining.size() < std::size_t(opt.batch) && admitted < windows.size()) {
      t0 = clock::now();
      const Window& win = windows[admitted];
      const RowMatrixXf features = encode(specs[win.file].window(win.seek), dense);
      const auto t1 = clock::now();
      r.encode_ms += ms(t0, t1);
      const int seq = decoder.open(features);
      joining.push_back({admitted++, BeamSearch(search_opt, rules_.eot), {seq}});
      joining_seqs.push_back(seq);
      const double open_ms = ms(t1, clock::now());
      r.decode_ms += open_ms;
      r.cross_open_ms += open_ms;
    }
    t0 = clock::now();
    std::size_t sequences = 0;
    for (const Live& l : live) sequences += l.seqs.size();
    r.max_batch = std::max(r.max_batch, static_cast<int>(live.size() + joining.size()));
    r.max_sequences = std::max(r.max_sequences, static_cast<int>(sequences + joining.size()));
    if (!live.empty()) {
      std::vector<int> seqs, tokens;
      for (const Live& l : live)
        for (std::size_t b = 0; b < l.seqs.size(); ++b) seqs.push_back(l.seqs[b]), tokens.push_back(l.search.beams()[b].tokens.back());
      RowMatrixXf logits = decoder.decode(seqs, tokens);
      ++r.decode_steps;
      r.step_tokens += seqs.size();
      note_memory();
      advance(live, logits);
    }
    if (!joining.empty()) {
      const auto t_prefill = clock::now();
      RowMatrixXf logits = decoder.prefill(joining_seqs, rules_.prompt);
      note_memory();
      advance(joining, logits);
      for (Live& l : joining) live.push_back(std::move(l));
      r.prefill_ms += ms(t_prefill, clock::now());
    }
    r.decode_ms += ms(t0, clock::now());
  }

  std::vector<int> window_index(files.size(), 0);  // per file, windows are in order
  for (const Window& win : windows) {
    Transcript& t = out.files[win.file];
    t.text += tok_.decode(win.tokens);
    t.tokens.insert(t.tokens.end(), win.tokens.begin(), win.tokens.end());
    r.text_tokens += win.tokens.size();
    if (win.cut) {
      t.cut_windows.push_back(window_index[win.file]);
      ++r.windows_cut;
    }
    ++window_index[win.file];
  }
  return out;
}

}  // namespace polyattn::whisper
