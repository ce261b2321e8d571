// Sample-rate conversion of mono float audio to Whisper's 16 kHz.
//
// Method: windowed-sinc interpolation evaluated as a polyphase filter. With integer rates,
// in/out = M/L after dividing by their gcd, output sample n sits at input position n*M/L,
// whose fractional part is one of L phases (PolyphaseKernel holds their weights).
// Kernel: h(d) = fc * sinc(fc * d) * blackman(d / half_width), fc = 0.95 * min(1, L/M)
// (cutoff at 95% of the lower Nyquist, so down-sampling is anti-aliased), 16 zero
// crossings per side. Samples outside the signal are zero. Good to about -70 dB, which is
// far below what the log-mel front end (clamped at max - 80 dB) can see.
#pragma once

#include <algorithm>
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

// The weights of the L phases, n_taps each: weights(phase)[j] multiplies input sample
// base + j - taps_left() for an output at position base + phase / L. Tabulated once when the
// table is small (every common rate: 44.1 kHz -> 16 kHz is 160 phases of 95 taps), otherwise
// computed per output sample: an odd rate such as 767999 Hz has 16000 phases of 1619 taps, a
// 103 MB table that a 48-byte WAV file would make us allocate.
class PolyphaseKernel {
 public:
  static constexpr std::size_t kMaxTableFloats = std::size_t{1} << 20;  // 4 MiB

  // in/out = M/L, reduced.
  PolyphaseKernel(std::int64_t L, std::int64_t M, std::size_t max_table_floats = kMaxTableFloats)
      : L_(L), fc_(0.95 * std::min(1.0, static_cast<double>(L) / static_cast<double>(M))),
        half_width_(kZeroCrossings / fc_), taps_left_(static_cast<int>(std::ceil(half_width_))), n_taps_(2 * taps_left_ + 1) {
    if (static_cast<double>(L) * n_taps_ > static_cast<double>(max_table_floats)) return;
    table_.resize(static_cast<std::size_t>(L) * static_cast<std::size_t>(n_taps_));
    const auto n = static_cast<std::size_t>(n_taps_);
    for (std::int64_t phase = 0; phase < L; ++phase) compute(phase, std::span<float>(table_).subspan(static_cast<std::size_t>(phase) * n, n));
  }

  int taps_left() const { return taps_left_; }
  int n_taps() const { return n_taps_; }
  std::size_t table_floats() const { return table_.size(); }

  // The n_taps weights of `phase`: from the table, or computed into `scratch`.
  std::span<const float> weights(std::int64_t phase, std::vector<float>& scratch) const {
    const auto n = static_cast<std::size_t>(n_taps_);
    if (!table_.empty()) return std::span<const float>(table_).subspan(static_cast<std::size_t>(phase) * n, n);
    scratch.resize(n);
    compute(phase, scratch);
    return scratch;
  }

 private:
  static constexpr double kZeroCrossings = 16.0;

  void compute(std::int64_t phase, std::span<float> out) const {
    const double frac = static_cast<double>(phase) / static_cast<double>(L_);
    for (int j = 0; j < n_taps_; ++j) {
      const double d = static_cast<double>(j - taps_left_) - frac;  // input sample minus position
      double w = 0.0;
      if (std::abs(d) < half_width_) {
        const double x = fc_ * d;
        const double sinc = x == 0.0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
        const double t = d / half_width_;  // in (-1, 1)
        const double blackman = 0.42 + 0.5 * std::cos(std::numbers::pi * t) + 0.08 * std::cos(2 * std::numbers::pi * t);
        w = fc_ * sinc * blackman;
      }
      out[static_cast<std::size_t>(j)] = static_cast<float>(w);
    }
  }

  std::int64_t L_;
  double fc_, half_width_;  // half_width in input samples
  int taps_left_, n_taps_;  // input offsets -taps_left .. +taps_left
  std::vector<float> table_;  // (L, n_taps), or empty
};

inline std::vector<float> resample(std::span<const float> in, std::int64_t in_rate, std::int64_t out_rate) {
  if (in_rate <= 0 || out_rate <= 0 || in_rate > 10'000'000 || out_rate > 10'000'000)
    throw UnsupportedError("resample: rates must be in (0, 1e7] Hz, got " + std::to_string(in_rate) +
                           " -> " + std::to_string(out_rate));
  if (in_rate == out_rate) return {in.begin(), in.end()};

  const std::int64_t g = std::gcd(in_rate, out_rate);
  const std::int64_t M = in_rate / g;  // input step per output period
  const std::int64_t L = out_rate / g;  // number of phases
  const PolyphaseKernel kernel(L, M);
  const int n_taps = kernel.n_taps();

  const std::int64_t n_in = static_cast<std::int64_t>(in.size());
  const std::int64_t n_out = (n_in * L + M - 1) / M;  // ceil(n_in * out / in)
  std::vector<float> out(static_cast<std::size_t>(n_out)), scratch;
  for (std::int64_t n = 0; n < n_out; ++n) {
    const std::int64_t base = (n * M) / L;
    const std::span<const float> h = kernel.weights((n * M) % L, scratch);
    double acc = 0.0;
    const std::int64_t first = base - kernel.taps_left();
    const std::int64_t j0 = std::max<std::int64_t>(0, -first);
    const std::int64_t j1 = std::min<std::int64_t>(n_taps, n_in - first);
    for (std::int64_t j = j0; j < j1; ++j) acc += static_cast<double>(h[static_cast<std::size_t>(j)]) * in[static_cast<std::size_t>(first + j)];
    out[static_cast<std::size_t>(n)] = static_cast<float>(acc);
  }
  return out;
}

}  // namespace polyattn::whisper
