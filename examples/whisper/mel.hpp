// Whisper's log-mel spectrogram, as openai-whisper's audio.py computes it:
//   STFT: n_fft 400, hop 160, periodic Hann window, torch.stft(center=True) reflect
//   padding, last frame dropped (the FFT is Eigen's, unsupported/Eigen/FFT, whose default
//   kissfft backend handles n = 400 = 2^4 5^2); power |X|^2; 80 Slaney-normalised mel filters (librosa
//   defaults, computed here, not loaded); log10(max(x, 1e-10)); clamp to (global max - 8);
//   (x + 4) / 4.
// Long audio: like whisper.transcribe, 30 s of zeros are appended to the samples before
// the STFT, and consecutive 3000-frame (30 s) windows are cut from the result.
#pragma once

#include <Eigen/Core>
#include <unsupported/Eigen/FFT>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "error.hpp"
#include "matrix.hpp"

namespace polyattn::whisper {

struct MelConfig {
  int sample_rate = 16000;
  int n_fft = 400;
  int hop_length = 160;
  int n_mels = 80;
  int chunk_frames = 3000;  // 30 s at 100 frames per second
};

// Slaney mel scale (librosa htk=False): linear below 1 kHz, logarithmic above.
inline double hz_to_mel_slaney(double hz) {
  constexpr double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return hz < min_log_hz ? hz / f_sp : min_log_mel + std::log(hz / min_log_hz) / logstep;
}

inline double mel_to_hz_slaney(double mel) {
  constexpr double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return mel < min_log_mel ? f_sp * mel : min_log_hz * std::exp(logstep * (mel - min_log_mel));
}

// librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm="slaney"),
// computed in double and rounded to float like librosa's float32 output.
// Shape (n_mels, n_fft/2 + 1).
inline RowMatrixXf mel_filters_slaney(int sample_rate, int n_fft, int n_mels) {
  if (sample_rate <= 0 || n_fft < 2 || n_mels < 1 || n_fft > (1 << 20) || n_mels > 4096)
    throw UnsupportedError("mel_filters_slaney: bad parameters sample_rate=" + std::to_string(sample_rate) +
                           " n_fft=" + std::to_string(n_fft) + " n_mels=" + std::to_string(n_mels));
  const int n_bins = n_fft / 2 + 1;
  std::vector<double> fft_hz(static_cast<std::size_t>(n_bins));
  for (int k = 0; k < n_bins; ++k) fft_hz[static_cast<std::size_t>(k)] = 0.5 * sample_rate * k / (n_bins - 1);
  // n_mels + 2 band edges, equally spaced in mel between 0 Hz and Nyquist.
  const double mel_max = hz_to_mel_slaney(0.5 * sample_rate);
  std::vector<double> edge_hz(static_cast<std::size_t>(n_mels + 2));
  for (int i = 0; i < n_mels + 2; ++i)
    edge_hz[static_cast<std::size_t>(i)] = mel_to_hz_slaney(mel_max * i / (n_mels + 1));

  RowMatrixXf filters(n_mels, n_bins);
  for (int m = 0; m < n_mels; ++m) {
    const double lo = edge_hz[static_cast<std::size_t>(m)], mid = edge_hz[static_cast<std::size_t>(m + 1)],
                 hi = edge_hz[static_cast<std::size_t>(m + 2)];
    const double enorm = 2.0 / (hi - lo);  // Slaney: constant energy per band
    for (int k = 0; k < n_bins; ++k) {
      const double f = fft_hz[static_cast<std::size_t>(k)];
      const double rising = (f - lo) / (mid - lo), falling = (hi - f) / (hi - mid);
      filters(m, k) = static_cast<float>(std::max(0.0, std::min(rising, falling)) * enorm);
    }
  }
  return filters;
}

// Power spectrogram |STFT|^2 of `samples`, torch.stft(center=True, pad_mode="reflect")
// with a periodic Hann window, last frame dropped. Shape (n_fft/2 + 1, n_samples / hop).
inline RowMatrixXf power_spectrogram(std::span<const float> samples, int n_fft, int hop_length) {
  if (n_fft < 2 || hop_length < 1)
    throw UnsupportedError("power_spectrogram: n_fft=" + std::to_string(n_fft) + " hop=" + std::to_string(hop_length));
  const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(samples.size());
  const std::ptrdiff_t pad = n_fft / 2;
  const std::ptrdiff_t n_frames = n / hop_length;  // 1 + n/hop frames, minus the dropped last one
  const int n_bins = n_fft / 2 + 1;
  RowMatrixXf power(n_bins, n_frames);
  if (n_frames == 0) return power;
  if (n <= pad)
    throw UnsupportedError("power_spectrogram: reflect padding needs more than n_fft/2 = " + std::to_string(pad) +
                           " samples, got " + std::to_string(n));

  std::vector<double> window(static_cast<std::size_t>(n_fft));
  for (int i = 0; i < n_fft; ++i)
    window[static_cast<std::size_t>(i)] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * i / n_fft);
  auto sample_at = [&](std::ptrdiff_t j) -> double {  // j indexes the unpadded signal
    if (j < 0) j = -j;
    else if (j >= n) j = 2 * (n - 1) - j;
    return samples[static_cast<std::size_t>(j)];
  };

  // One real FFT per frame, half spectrum (bins 0..n_fft/2): Eigen's kissfft computes it as a
  // complex FFT of n_fft/2 points when 4 divides n_fft.
  Eigen::FFT<double> fft;
  fft.SetFlag(Eigen::FFT<double>::HalfSpectrum);
  std::vector<double> frame(static_cast<std::size_t>(n_fft));
  std::vector<std::complex<double>> spectrum(static_cast<std::size_t>(n_bins));
  for (std::ptrdiff_t f = 0; f < n_frames; ++f) {
    for (int i = 0; i < n_fft; ++i)
      frame[static_cast<std::size_t>(i)] = window[static_cast<std::size_t>(i)] * sample_at(f * hop_length + i - pad);
    fft.fwd(spectrum.data(), frame.data(), n_fft);
    for (int k = 0; k < n_bins; ++k) power(k, f) = static_cast<float>(std::norm(spectrum[static_cast<std::size_t>(k)]));
  }
  return power;
}

// Whisper's normalised log-mel of `samples` (16 kHz mono). Shape (n_mels, n_samples / hop).
inline RowMatrixXf log_mel_spectrogram(std::span<const float> samples, const RowMatrixXf& filters,
                                       const MelConfig& cfg = {}) {
  if (filters.rows() != cfg.n_mels || filters.cols() != cfg.n_fft / 2 + 1)
    throw UnsupportedError("log_mel_spectrogram: filters are " + std::to_string(filters.rows()) + "x" +
                           std::to_string(filters.cols()) + ", expected " + std::to_string(cfg.n_mels) + "x" +
                           std::to_string(cfg.n_fft / 2 + 1));
  for (std::size_t i = 0; i < samples.size(); ++i)
    if (!std::isfinite(samples[i]))
      throw UnsupportedError("log_mel_spectrogram: sample " + std::to_string(i) + " is not finite");
  const RowMatrixXf power = power_spectrogram(samples, cfg.n_fft, cfg.hop_length);
  RowMatrixXf mel = filters * power;  // (n_mels, bins) x (bins, frames)
  if (mel.size() == 0) return mel;
  mel = mel.array().max(1e-10f).log10().matrix();
  const float floor = mel.maxCoeff() - 8.0f;
  mel = ((mel.array().max(floor) + 4.0f) / 4.0f).matrix();
  return mel;
}

// The log-mel of a whole recording as whisper.transcribe prepares it: 30 s of zeros are
// appended before the STFT, so every window [seek, seek + 3000) is full.
struct WhisperSpectrogram {
  RowMatrixXf mel;         // (n_mels, content_frames + chunk_frames)
  int content_frames = 0;  // frames that come from the audio itself
  int chunk_frames = 3000;

  // The encoder input for the window starting at `seek`: frames [seek, seek + 3000) of
  // the zero-padded recording, shape (n_mels, chunk_frames). Frames past the audio are the
  // log-mel of silence, as in openai-whisper's decode(pad_or_trim(audio)) and whisper.cpp.
  // (whisper.transcribe instead pads the cut spectrogram with 0 after normalisation; on
  // jfk.wav with tiny.en that variant loses the comma in "for you, ask".)
  RowMatrixXf window(int seek) const {
    if (seek < 0 || seek + chunk_frames > mel.cols() || (seek >= content_frames && seek != 0))
      throw UnsupportedError("WhisperSpectrogram::window: seek " + std::to_string(seek) + " is outside [0, " +
                             std::to_string(std::max(content_frames, 1)) + ")");
    return mel.middleCols(seek, chunk_frames);
  }

  // The long-form encoder input (openai-whisper's and faster-whisper's transcribe): frames
  // [seek, seek + frames) of the recording, then zeros up to chunk_frames.
  RowMatrixXf window_zero_padded(int seek, int frames) const {
    if (seek < 0 || frames < 0 || frames > chunk_frames || seek + frames > content_frames)
      throw UnsupportedError("WhisperSpectrogram::window_zero_padded: frames [" + std::to_string(seek) + ", " + std::to_string(seek + frames) +
                             ") are not within the " + std::to_string(content_frames) + " frames of audio");
    RowMatrixXf w = RowMatrixXf::Zero(mel.rows(), chunk_frames);
    w.leftCols(frames) = mel.middleCols(seek, frames);
    return w;
  }

  // Start frames of the consecutive 30 s windows covering the audio (at least one).
  std::vector<int> window_starts() const {
    std::vector<int> starts;
    for (int seek = 0; seek < content_frames || starts.empty(); seek += chunk_frames) starts.push_back(seek);
    return starts;
  }
};

inline WhisperSpectrogram whisper_spectrogram(std::span<const float> samples, const RowMatrixXf& filters,
                                              const MelConfig& cfg = {}) {
  const std::size_t pad = static_cast<std::size_t>(cfg.chunk_frames) * static_cast<std::size_t>(cfg.hop_length);
  std::vector<float> padded(samples.size() + pad, 0.0f);
  std::copy(samples.begin(), samples.end(), padded.begin());
  WhisperSpectrogram s;
  s.mel = log_mel_spectrogram(padded, filters, cfg);
  s.chunk_frames = cfg.chunk_frames;
  s.content_frames = static_cast<int>(s.mel.cols()) - cfg.chunk_frames;
  return s;
}

}  // namespace polyattn::whisper
