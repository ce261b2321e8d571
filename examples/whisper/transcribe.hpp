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

#include "model.hpp"

namespace polyattn::whisper {

template <class Policies>
Transcription WhisperModel::transcribe(std::span<const std::vector<float>> files, const TranscribeOptions& opt) const {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (opt.batch < 1) throw Error("transcribe: batch must be >= 1, got " + std::to_string(opt.batch));
  Transcription out;
  TranscribeReport& r = out.report;
  r.policies = Policies::name();
  Dense& dense = opt.dense ? *opt.dense : eigen_dense();
  r.dense = dense.name();

  struct Window {
    std::size_t file;
    int seek;
    std::vector<int> tokens;
    bool cut = false;  // closed at the text context, not at <|endoftext|>
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

  t0 = clock::now();
  Decoder<Policies> decoder(w_, {.max_sequences = std::min<int>(opt.batch, r.windows), .threads = opt.threads, .dense = &dense});
  r.prepare_ms = ms(t0, clock::now());
  r.notes = decoder.notes();
  struct Live {
    int seq;
    std::size_t window;
    int next_token;  // sampled, not yet fed
  };
  std::vector<Live> live;
  std::size_t admitted = 0;
  auto note_memory = [&] {
    const DecoderCacheUse u = decoder.cache_use();
    if (u.self.bytes_held >= r.peak.self.bytes_held) r.peak.self = u.self;
    if (u.cross.bytes_held >= r.peak.cross.bytes_held) r.peak.cross = u.cross;
  };
  // Samples each sequence's next token from its logits row; finished ones leave `batch`.
  auto sample = [&](std::vector<Live>& batch, RowMatrixXf& logits) {
    std::vector<Live> kept;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Window& win = windows[batch[i].window];
      const int token = next_token(logits.row(static_cast<Eigen::Index>(i)), win.tokens.empty());
      const bool full = token != rules_.eot && rules_.prompt.size() + win.tokens.size() + 1 >= std::size_t(rules_.max_length);
      if (token != rules_.eot) win.tokens.push_back(token);
      win.cut = full;
      if (token == rules_.eot || full) {
        decoder.close(batch[i].seq);
        const int total = out.files[win.file].windows;
        if (opt.on_window) opt.on_window(win.file, total - --windows_left[win.file], total);
      } else {
        kept.push_back({batch[i].seq, batch[i].window, token});
      }
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
      joining.push_back({decoder.open(features), admitted++, -1});
      joining_seqs.push_back(joining.back().seq);
      const double open_ms = ms(t1, clock::now());
      r.decode_ms += open_ms;
      r.cross_open_ms += open_ms;
    }
    t0 = clock::now();
    r.max_batch = std::max(r.max_batch, static_cast<int>(live.size() + joining.size()));
    if (!live.empty()) {
      std::vector<int> seqs, tokens;
      for (const Live& l : live) seqs.push_back(l.seq), tokens.push_back(l.next_token);
      RowMatrixXf logits = decoder.decode(seqs, tokens);
      ++r.decode_steps;
      r.step_tokens += seqs.size();
      note_memory();
      sample(live, logits);
    }
    if (!joining.empty()) {
      const auto t_prefill = clock::now();
      RowMatrixXf logits = decoder.prefill(joining_seqs, rules_.prompt);
      note_memory();
      sample(joining, logits);
      live.insert(live.end(), joining.begin(), joining.end());
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
