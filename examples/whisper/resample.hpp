// Sample-rate conversion of mono float audio to Whisper's 16 kHz.
//
// Method: windowed-sinc interpolation evaluated as a polyphase filter. With integer rates,
// in/out = M/L after dividing by their gcd, output sample n sits at input position n*M/L,
// whose fractional part is one of L phases; the L kernels are tabulated once.
// Kernel: h(d) = fc * sinc(fc * d) * blackman(d / half_width), fc = 0.95 * min(1, L/M)
// (cutoff at 95% of the lower Nyquist, so down-sampling is anti-aliased), 16 zero
// crossings per side. Samples outside the signal are zero. Good to about -70 dB, which is
// far below what the log-mel front end (clamped at max - 80 dB) can see.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "error.hpp"

namespace polyattn::whisper {

inline std::vector<float> resample(std::span<const float> in, std::int64_t in_rate, std::int64_t out_rate) {
  if (in_rate <= 0 || out_rate <= 0 || in_rate > 10'000'000 || out_rate > 10'000'000)
    throw UnsupportedError("resample: rates must be in (0, 1e7] Hz, got " + std::to_string(in_rate) +
                           " -> " + std::to_string(out_rate));
  if (in_rate == out_rate) return {in.begin(), in.end()};

  const std::int64_t g = std::gcd(in_rate, out_rate);
  const std::int64_t M = in_rate / g;  // input step per output period
  const std::int64_t L = out_rate / g;  // number of phases
  const double fc = 0.95 * std::min(1.0, static_cast<double>(L) / static_cast<double>(M));
  constexpr double kZeroCrossings = 16.0;
  const double half_width = kZeroCrossings / fc;  // in input samples
  const int taps_left = static_cast<int>(std::ceil(half_width));
  const int n_taps = 2 * taps_left + 1;  // input offsets -taps_left .. +taps_left

  if (static_cast<double>(L) * n_taps > 64.0 * 1024 * 1024)
    throw UnsupportedError("resample: " + std::to_string(in_rate) + " -> " + std::to_string(out_rate) +
                           " Hz needs a polyphase table of " + std::to_string(L) + " x " +
                           std::to_string(n_taps) + " taps, more than this simple resampler allows");

  // table[phase][j]: weight of input sample (base + j - taps_left) for output phase `phase`,
  // where position = base + phase / L.
  std::vector<float> table(static_cast<std::size_t>(L) * static_cast<std::size_t>(n_taps));
  for (std::int64_t phase = 0; phase < L; ++phase) {
    const double frac = static_cast<double>(phase) / static_cast<double>(L);
    for (int j = 0; j < n_taps; ++j) {
      const double d = static_cast<double>(j - taps_left) - frac;  // input sample minus position
      double w = 0.0;
      if (std::abs(d) < half_width) {
        const double x = fc * d;
        const double sinc = x == 0.0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
        const double t = d / half_width;  // in (-1, 1)
        const double blackman = 0.42 + 0.5 * std::cos(std::numbers::pi * t) + 0.08 * std::cos(2 * std::numbers::pi * t);
        w = fc * sinc * blackman;
      }
      table[static_cast<std::size_t>(phase * n_taps + j)] = static_cast<float>(w);
    }
  }

  const std::int64_t n_in = static_cast<std::int64_t>(in.size());
  const std::int64_t n_out = (n_in * L + M - 1) / M;  // ceil(n_in * out / in)
  std::vector<float> out(static_cast<std::size_t>(n_out));
  for (std::int64_t n = 0; n < n_out; ++n) {
    const std::int64_t base = (n * M) / L;
    const std::int64_t phase = (n * M) % L;
    const float* h = &table[static_cast<std::size_t>(phase * n_taps)];
    double acc = 0.0;
    const std::int64_t first = base - taps_left;
    const std::int64_t j0 = std::max<std::int64_t>(0, -first);
    const std::int64_t j1 = std::min<std::int64_t>(n_taps, n_in - first);
    for (std::int64_t j = j0; j < j1; ++j) acc += static_cast<double>(h[j]) * in[static_cast<std::size_t>(first + j)];
    out[static_cast<std::size_t>(n)] = static_cast<float>(acc);
  }
  return out;
}

}  // namespace polyattn::whisper
