// WhisperModel::transcribe<Policies>: the batched decoding loop (model.hpp describes it). Its own
// header because each policy combination instantiates the whole decoder: the CPU combinations are
// compiled once, in transcribe_cpu.cpp, and every other translation unit links them; a
// translation unit that transcribes with a combination of its own (the CUDA ones) includes this.
//
// Work comes as window jobs: a window of one file at one temperature. With timestamps off every
// 30 s window of every file is a job from the start; with timestamps on (long-form) a file has one
// job at a time, the next made when the last is kept, starting where its last complete segment
// ended and prompted with the text so far. A job whose text fails the fallback tests is queued
// again at the next temperature, with the same encoder output. Up to `batch` jobs are decoded at
// once, each with its beams (or samples), all in one decoder step.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "beam_search.hpp"
#include "model.hpp"
#include "openmp_team.hpp"
#include "segments.hpp"

namespace polyattn::whisper {

template <class Policies>
Transcription WhisperModel::transcribe(const AudioSource& audio, const TranscribeOptions& opt) const {
  if (!audio.read && audio.count > 0) throw Error("transcribe: the audio source has no read function");
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (opt.batch < 1) throw Error("transcribe: batch must be >= 1, got " + std::to_string(opt.batch));
  if (opt.beam_size < 1) throw Error("transcribe: beam_size must be >= 1, got " + std::to_string(opt.beam_size));
  if (opt.temperatures.empty()) throw Error("transcribe: temperatures is empty (give {0} to decode each window once)");
  auto search_options = [&](float temperature, int prompt_tokens, std::uint64_t seed) {
    return BeamSearchOptions{.beam_size = opt.beam_size, .patience = opt.patience, .length_penalty = opt.length_penalty,
                             .max_new_tokens = max_new_tokens(prompt_tokens), .temperature = temperature, .best_of = opt.best_of,
                             .seed = seed};
  };
  for (float t : opt.temperatures)  // refuses bad options before anything is encoded
    [[maybe_unused]] const BeamSearch check(search_options(t, static_cast<int>(rules_.prompt.size()), 0), rules_.eot);
  const SpecialTokens& special = tok_.special();
  if (opt.timestamps) (void)timestamp_tokens();  // throws when the vocabulary has none
  const int sequences_per_window = std::max(opt.beam_size, opt.temperatures.size() > 1 || opt.temperatures[0] > 0.0f ? opt.best_of : 1);

  Transcription out;
  TranscribeReport& r = out.report;
  r.policies = Policies::name();
  Dense& dense = opt.dense ? *opt.dense : default_dense();
  r.dense = dense.name();

  // A window of one file at one temperature.
  struct Job {
    std::size_t file;
    int seek;           // first mel frame
    int frames;         // frames of audio in the window
    int window;         // timestamps off: the window's index in its file
    std::size_t temperature = 0;  // index into opt.temperatures
    std::shared_ptr<const RowMatrixXf> features{};  // the encoder output, once encoded (kept for retries)
    std::vector<int> prompt{};
  };
  struct FileState {
    WhisperSpectrogram spec;  // its mel is made when the file is opened, freed when no window needs it
    std::size_t unencoded = 0;            // timestamps off: windows not encoded yet
    std::vector<int> all_tokens;          // timestamps on: the kept segments' tokens, the prompt's source
    std::size_t prompt_reset_since = 0;   // all_tokens before this are not prompted again
    std::vector<std::vector<Segment>> windows;  // timestamps off: each window's segment, in window order
  };
  std::vector<FileState> state(audio.count);
  std::deque<Job> queue;
  out.files.resize(audio.count);
  // Files are opened in order (samples read, spectrogram made, windows queued) as the queue runs
  // dry, and a file's spectrogram is freed once none of its windows needs encoding: the batch, not
  // the number of files, bounds the recordings held. Jobs still leave the queue in file order, and
  // a window's tokens do not depend on when it is decoded.
  std::size_t next_file = 0;
  int spectrograms_held = 0;
  auto free_spectrogram = [&](std::size_t f) {
    state[f].spec.mel = RowMatrixXf();
    --spectrograms_held;
  };
  auto open_next_file = [&] {
    const auto t = clock::now();
    const std::size_t f = next_file++;
    FileState& s = state[f];
    {
      std::vector<float> buffer;  // the file's samples when the source reads them here: freed below
      const std::span<const float> samples = audio.read(f, buffer);
      s.spec = whisper_spectrogram(samples, filters_);
      out.files[f].seconds = static_cast<double>(samples.size()) / 16000.0;
    }
    r.max_spectrograms = std::max(r.max_spectrograms, ++spectrograms_held);
    const WhisperSpectrogram& spec = s.spec;
    if (opt.timestamps) {
      if (spec.content_frames > 0)
        queue.push_back({f, 0, std::min(spec.chunk_frames, spec.content_frames), 0});
      else
        free_spectrogram(f);
    } else {
      const std::vector<int> starts = spec.window_starts();
      s.windows.resize(starts.size());
      s.unencoded = starts.size();
      out.files[f].windows = static_cast<int>(starts.size());
      for (std::size_t w = 0; w < starts.size(); ++w)
        queue.push_back({f, starts[w], std::clamp(spec.content_frames - starts[w], 0, spec.chunk_frames), static_cast<int>(w)});
    }
    r.mel_ms += ms(t, clock::now());
  };
  // Enough files to fill the batch, or all of them: the decoder is sized from this queue.
  while (next_file < audio.count && queue.size() < std::size_t(opt.batch)) open_next_file();
  if (queue.empty()) return out;

  // The prompt of a file's next window: with timestamps off <|startoftranscript|><|notimestamps|>
  // (rules().prompt); on, <|startoftranscript|> after <|startofprev|> and up to 223 tokens of the
  // text so far when conditioning on it.
  auto prompt_for = [&](std::size_t f) {
    if (!opt.timestamps) return rules_.prompt;
    std::vector<int> prompt;
    const FileState& s = state[f];
    if (opt.condition_on_previous_text && s.all_tokens.size() > s.prompt_reset_since && special.start_of_prev >= 0) {
      const std::size_t keep = std::min<std::size_t>(s.all_tokens.size() - s.prompt_reset_since, std::size_t(rules_.max_length / 2 - 1));
      prompt.push_back(special.start_of_prev);
      prompt.insert(prompt.end(), s.all_tokens.end() - std::ptrdiff_t(keep), s.all_tokens.end());
    }
    for (int id : rules_.prompt)
      if (id != special.no_timestamps) prompt.push_back(id);
    return prompt;
  };

  // Timestamps off: a file's windows are all queued when it opens; on: a file has one window at a
  // time. Either way, with every file opened or at least `batch` windows queued, no more windows
  // than are queued now are ever decoded at once.
  const int windows_at_once = std::min<int>(opt.batch, static_cast<int>(queue.size()));
  // The decoder (its policies' converted weights and its caches) is built once the first window
  // is encoded, so that it and the encoder's activations are never resident together on a single
  // window: that was the peak of a one-clip run with the X-cache policies.
  std::optional<Decoder<Policies>> built;
  auto decoder = [&]() -> Decoder<Policies>& {
    if (!built) {
      const auto t = clock::now();
      built.emplace(w_, DecoderConfig{.max_sequences = windows_at_once * sequences_per_window, .max_audio = windows_at_once,
                                      .threads = openmp_team(opt.threads > 0 ? opt.threads : Eigen::nbThreads()), .dense = &dense});
      r.prepare_ms = ms(t, clock::now());
      r.notes = built->notes();
    }
    return *built;
  };

  // A job being decoded: its search and the decoder sequence of each of its beams (samples).
  struct Live {
    Job job;
    BeamSearch search;
    std::vector<int> seqs;  // seqs[b]: beam b of search.beams()
    float no_speech_prob = -1.0f;
  };
  std::vector<Live> live;
  auto note_memory = [&] {
    const DecoderCacheUse u = decoder().cache_use();
    if (u.self.bytes_held >= r.peak.self.bytes_held) r.peak.self = u.self;
    if (u.cross.bytes_held >= r.peak.cross.bytes_held) r.peak.cross = u.cross;
  };

  // A job's search ended: keep its result, or queue it again at the next temperature.
  auto finish = [&](Live& l) {
    Job& job = l.job;
    const BeamSearch::Hypothesis& best = l.search.best();
    const float temperature = opt.temperatures[job.temperature];
    const std::string text = tok_.decode(best.tokens);
    const float avg_log_prob = best.log_prob / static_cast<float>(best.tokens.size() + 1);
    // Of the text without its leading and trailing blanks, as openai-whisper and faster-whisper.
    const std::size_t first = text.find_first_not_of(" \t\n"), last = text.find_last_not_of(" \t\n");
    const float ratio = static_cast<float>(compression_ratio(first == std::string::npos ? std::string() : text.substr(first, last - first + 1)));
    // openai-whisper's decode_with_fallback: retry when the text repeats itself or is unlikely,
    // unless the window is likely silence (then it is skipped below, not retried). When every
    // temperature fails, the last attempt is kept (faster-whisper keeps the attempt of best
    // average log-prob among those that passed the compression test).
    bool fallback = ratio > opt.compression_ratio_threshold || avg_log_prob < opt.log_prob_threshold;
    if (l.no_speech_prob > opt.no_speech_threshold && avg_log_prob < opt.log_prob_threshold) fallback = false;
    if (fallback && job.temperature + 1 < opt.temperatures.size()) {
      ++job.temperature;
      ++r.fallbacks;
      queue.push_front(std::move(job));
      return;
    }
    FileState& s = state[job.file];
    Transcript& t = out.files[job.file];
    const Segment info{.avg_log_prob = avg_log_prob, .temperature = temperature, .compression_ratio = ratio, .no_speech_prob = l.no_speech_prob};
    if (!best.ended) {
      t.cut_windows.push_back(opt.timestamps ? t.windows : job.window);
      ++r.windows_cut;
    }
    const double window_start = double(job.seek) * kSecondsPerFrame;
    double done_s = 0.0;
    if (!opt.timestamps) {
      Segment seg = info;
      seg.start = window_start;
      seg.end = window_start + double(job.frames) * kSecondsPerFrame;
      seg.text = text;
      seg.tokens = best.tokens;
      s.windows[std::size_t(job.window)] = {std::move(seg)};
      for (const auto& w : s.windows)
        if (!w.empty()) done_s += w.front().end - w.front().start;
    } else {
      ++t.windows;
      // A window that is likely silence (and unlikely text) is skipped whole.
      const bool silence = l.no_speech_prob > opt.no_speech_threshold && !(avg_log_prob > opt.log_prob_threshold);
      int next_seek = job.seek + job.frames;
      if (!silence) {
        const WindowSplit split = split_window(best.tokens, special.timestamp_begin, job.frames);
        for (const SegmentSpan& span : split.segments) {
          Segment seg = info;
          seg.start = window_start + span.start;
          seg.end = window_start + span.end;
          seg.tokens.assign(best.tokens.begin() + std::ptrdiff_t(span.first), best.tokens.begin() + std::ptrdiff_t(span.last));
          seg.text = tok_.decode(seg.tokens);
          // An instantaneous or empty segment is dropped, as faster-whisper drops it.
          if (seg.start == seg.end || seg.text.find_first_not_of(" \t\n") == std::string::npos) continue;
          s.all_tokens.insert(s.all_tokens.end(), seg.tokens.begin(), seg.tokens.end());
          t.segments.push_back(std::move(seg));
        }
        next_seek = job.seek + split.seek_frames;
      }
      if (!opt.condition_on_previous_text || temperature > 0.5f) s.prompt_reset_since = s.all_tokens.size();
      done_s = std::min(double(next_seek) * kSecondsPerFrame, t.seconds);
      if (next_seek < s.spec.content_frames)
        queue.push_back({job.file, next_seek, std::min(s.spec.chunk_frames, s.spec.content_frames - next_seek), 0});
      else
        free_spectrogram(job.file);
    }
    if (opt.on_window) opt.on_window(job.file, done_s, t.seconds);
  };

  // One search step for each job of `batch`, whose beams' logits are consecutive rows of
  // `logits` in batch order. A job whose search ends closes its sequences and leaves `batch`;
  // the others move their sequences as the search says: a beam extended once keeps its sequence,
  // one extended k times forks k - 1 more, one not extended is closed (first, so its slot is free).
  auto advance = [&](std::vector<Live>& batch, RowMatrixXf& logits) {
    std::vector<Live> kept;
    Eigen::Index row = 0;
    for (Live& l : batch) {
      const auto n = static_cast<Eigen::Index>(l.seqs.size());
      if (l.search.step() == 0 && l.job.prompt.back() == special.sot && special.no_speech >= 0) {
        // P(<|nospeech|>) after <|startoftranscript|>, from the raw logits (as CTranslate2).
        const auto z = logits.row(row);
        const float max = z.maxCoeff();
        l.no_speech_prob = std::exp(z[special.no_speech] - max) / (z.array() - max).exp().sum();
      }
      for (Eigen::Index b = 0; b < n; ++b) log_probs(logits.row(row + b), l.search.beams()[std::size_t(b)].tokens, opt.timestamps);
      const std::vector<int> parents = l.search.advance(logits.middleRows(row, n));
      row += n;
      if (l.search.finished()) {
        for (int seq : l.seqs) decoder().close(seq);
        finish(l);
        continue;
      }
      std::vector<int> uses(l.seqs.size(), 0);
      for (int p : parents) ++uses[std::size_t(p)];
      for (std::size_t b = 0; b < l.seqs.size(); ++b)
        if (uses[b] == 0) decoder().close(l.seqs[b]);
      std::vector<int> seqs(parents.size());
      std::vector<bool> taken(l.seqs.size(), false);
      for (std::size_t b = 0; b < parents.size(); ++b) {
        const auto p = std::size_t(parents[b]);
        seqs[b] = taken[p] ? decoder().fork(l.seqs[p]) : l.seqs[p];
        taken[p] = true;
      }
      l.seqs = std::move(seqs);
      kept.push_back(std::move(l));
    }
    batch = std::move(kept);
  };

  clock::time_point t0;
  while (!live.empty() || !queue.empty() || next_file < audio.count) {
    std::vector<Live> joining;
    while (live.size() + joining.size() < std::size_t(opt.batch)) {
      if (queue.empty() && next_file < audio.count) {
        open_next_file();
        continue;
      }
      if (queue.empty()) break;
      Job job = std::move(queue.front());
      queue.pop_front();
      t0 = clock::now();
      if (!job.features) {
        const WhisperSpectrogram& spec = state[job.file].spec;
        // Long-form windows are zero-padded after the audio, as openai-whisper's transcribe pads them.
        const RowMatrixXf mel = opt.timestamps ? spec.window_zero_padded(job.seek, job.frames) : spec.window(job.seek);
        job.features = std::make_shared<const RowMatrixXf>(encode(mel, dense));
        if (!opt.timestamps && --state[job.file].unencoded == 0) free_spectrogram(job.file);
#if defined(__GLIBC__)
        // The encoder's activations (a few MB each) are free again, but glibc keeps such blocks
        // in its arenas once it has seen them freed (its mmap threshold rises to their size), so
        // they stayed resident through the decode: 13 MB of a 166 MiB single-clip peak on the
        // Xeon. Handing them back costs well under a millisecond per window.
        malloc_trim(0);
#endif
      }
      r.encode_ms += ms(t0, clock::now());
      job.prompt = prompt_for(job.file);
      const float temperature = opt.temperatures[job.temperature];
      // Seeded per file, window start and temperature: a run repeats exactly whatever the batch.
      const std::uint64_t seed = opt.seed ^ (std::uint64_t(job.file) << 40) ^ (std::uint64_t(job.seek) << 8) ^ job.temperature;
      Decoder<Policies>& dec = decoder();  // built here for the first window (prepare_ms)
      const auto t_open = clock::now();
      const int seq = dec.open(*job.features);
      // The cross cache holds its own copy now; the job's is kept only for a retry at a higher
      // temperature. Without one, dropping it saves 2.3 MB (tiny) per window in flight: 37 MB
      // at --batch 16.
      if (opt.temperatures.size() == 1) job.features.reset();
      BeamSearch search(search_options(temperature, static_cast<int>(job.prompt.size()), seed), rules_.eot);
      joining.push_back({std::move(job), std::move(search), {seq}});
      ++r.windows;
      const double open_ms = ms(t_open, clock::now());
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
      RowMatrixXf logits = decoder().decode(seqs, tokens);
      ++r.decode_steps;
      r.step_tokens += seqs.size();
      note_memory();
      advance(live, logits);
    }
    // Joining jobs with the same prompt are prefilled together.
    while (!joining.empty()) {
      const auto t_prefill = clock::now();
      std::vector<Live> group, rest;
      std::vector<int> seqs;
      for (Live& l : joining)
        if (group.empty() || l.job.prompt == group.front().job.prompt) {
          seqs.push_back(l.seqs.front());
          group.push_back(std::move(l));
        } else {
          rest.push_back(std::move(l));
        }
      joining = std::move(rest);
      RowMatrixXf logits = decoder().prefill(seqs, group.front().job.prompt);
      note_memory();
      advance(group, logits);
      for (Live& l : group) live.push_back(std::move(l));
      r.prefill_ms += ms(t_prefill, clock::now());
    }
    r.decode_ms += ms(t0, clock::now());
  }

  for (std::size_t f = 0; f < audio.count; ++f) {
    Transcript& t = out.files[f];
    if (!opt.timestamps)
      for (auto& w : state[f].windows) t.segments.insert(t.segments.end(), w.begin(), w.end());
    std::sort(t.cut_windows.begin(), t.cut_windows.end());
    for (const Segment& seg : t.segments) {
      t.text += seg.text;
      t.tokens.insert(t.tokens.end(), seg.tokens.begin(), seg.tokens.end());
      r.text_tokens += seg.tokens.size();
    }
  }
  return out;
}

}  // namespace polyattn::whisper
