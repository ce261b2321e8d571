#include <doctest/doctest.h>

#include <whisper/byte_reader.hpp>
#include <whisper/mel.hpp>

#include <unsupported/Eigen/FFT>

#include <chrono>
#include <cmath>
#include <numbers>

#include "test_util.hpp"

using namespace polyattn::whisper;

TEST_SUITE("mel") {
  TEST_CASE("Eigen's FFT (kissfft) matches a direct DFT for many sizes, complex and real half-spectrum") {
    // mel.hpp's power spectrogram is Eigen::FFT<double>'s real transform with HalfSpectrum.
    using Complex = std::complex<double>;
    whisper_test::Rng rng(1);
    Eigen::FFT<double> fft, half;
    half.SetFlag(Eigen::FFT<double>::HalfSpectrum);
    // Not n = 1: kissfft has no factor for it (it crashes); power_spectrogram refuses n_fft < 2.
    CHECK_THROWS_AS(power_spectrogram(std::vector<float>(1000, 0.0f), 1, 160), UnsupportedError);
    for (std::size_t n : {2u, 3u, 4u, 5u, 6u, 7u, 8u, 12u, 16u, 25u, 97u, 100u, 400u, 512u}) {
      std::vector<Complex> x(n), y(n);
      for (auto& v : x) v = {rng.uniform() - 0.5, rng.uniform() - 0.5};
      fft.fwd(y.data(), x.data(), static_cast<Eigen::Index>(n));
      double max_err = 0;
      for (std::size_t k = 0; k < n; ++k) {
        Complex acc = 0;
        for (std::size_t j = 0; j < n; ++j)
          acc += x[j] * std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n));
        max_err = std::max(max_err, std::abs(acc - y[k]));
      }
      CAPTURE(n);
      CHECK(max_err < 1e-12 * static_cast<double>(n + 1));
      // Real input, bins 0..n/2.
      std::vector<double> r(n);
      for (auto& v : r) v = rng.uniform() - 0.5;
      std::vector<Complex> h(n / 2 + 1);
      half.fwd(h.data(), r.data(), static_cast<Eigen::Index>(n));
      double max_err_real = 0;
      for (std::size_t k = 0; k <= n / 2; ++k) {
        Complex acc = 0;
        for (std::size_t j = 0; j < n; ++j)
          acc += r[j] * std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n));
        max_err_real = std::max(max_err_real, std::abs(acc - h[k]));
      }
      CHECK(max_err_real < 1e-12 * static_cast<double>(n + 1));
    }
  }

  TEST_CASE("Slaney filters match mel_80_80x201.f32le") {
    const std::string path = whisper_test::data_file("mel_80_80x201.f32le");
    if (!whisper_test::have_file(path)) return;
    const auto bytes = read_file_bytes(path);
    REQUIRE(bytes.size() == 80 * 201 * 4);
    const RowMatrixXf ref = Eigen::Map<const RowMatrixXf>(reinterpret_cast<const float*>(bytes.data()), 80, 201);
    const RowMatrixXf mine = mel_filters_slaney(16000, 400, 80);
    const float max_abs = (ref - mine).cwiseAbs().maxCoeff();
    MESSAGE("max |filters - reference| = " << max_abs << " (max filter value " << ref.maxCoeff() << ")");
    CHECK(max_abs < 1e-6f);
    const std::string path128 = whisper_test::data_file("mel_128_128x201.f32le");
    if (whisper_test::have_file(path128)) {
      const auto b128 = read_file_bytes(path128);
      REQUIRE(b128.size() == 128 * 201 * 4);
      const RowMatrixXf ref128 = Eigen::Map<const RowMatrixXf>(reinterpret_cast<const float*>(b128.data()), 128, 201);
      CHECK((ref128 - mel_filters_slaney(16000, 400, 128)).cwiseAbs().maxCoeff() < 1e-6f);
    }
  }

  TEST_CASE("log-mel of a sine matches a direct computation") {
    // 0.37 s chirp-free two-tone signal; the direct path: reflect pad, periodic Hann,
    // naive DFT in double, mel filters, log10, clamp, scale.
    const int n = 5923;
    std::vector<float> x(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      x[static_cast<std::size_t>(i)] = static_cast<float>(0.3 * std::sin(2 * std::numbers::pi * 440.0 * i / 16000) +
                                                          0.05 * std::sin(2 * std::numbers::pi * 3000.0 * i / 16000 + 1.0));
    const RowMatrixXf filters = mel_filters_slaney(16000, 400, 80);
    const RowMatrixXf mel = log_mel_spectrogram(x, filters);
    const int frames = n / 160;
    REQUIRE(mel.rows() == 80);
    REQUIRE(mel.cols() == frames);

    Eigen::MatrixXd power(201, frames);
    for (int f = 0; f < frames; ++f) {
      for (int k = 0; k < 201; ++k) {
        double re = 0, im = 0;
        for (int i = 0; i < 400; ++i) {
          int j = f * 160 + i - 200;
          if (j < 0) j = -j;
          if (j >= n) j = 2 * (n - 1) - j;
          const double w = 0.5 - 0.5 * std::cos(2 * std::numbers::pi * i / 400);
          const double a = -2 * std::numbers::pi * static_cast<double>((i * k) % 400) / 400;
          re += w * x[static_cast<std::size_t>(j)] * std::cos(a);
          im += w * x[static_cast<std::size_t>(j)] * std::sin(a);
        }
        power(k, f) = re * re + im * im;
      }
    }
    Eigen::MatrixXd ref = filters.cast<double>() * power;
    ref = ref.array().max(1e-10).log10();
    ref = (ref.array().max(ref.maxCoeff() - 8.0) + 4.0) / 4.0;
    const double err = (ref - mel.cast<double>()).cwiseAbs().maxCoeff();
    MESSAGE("max |log-mel - direct| = " << err);
    CHECK(err < 1e-5);
  }

  TEST_CASE("30 s windows and speed") {
    std::vector<float> x(16000 * 65);  // 65 s -> three windows
    whisper_test::Rng rng(3);
    for (auto& v : x) v = static_cast<float>(rng.uniform() - 0.5) * 0.1f;
    const RowMatrixXf filters = mel_filters_slaney(16000, 400, 80);
    const std::vector<float> thirty(x.begin(), x.begin() + 16000 * 30);
    const auto t0 = std::chrono::steady_clock::now();
    const RowMatrixXf m30 = log_mel_spectrogram(thirty, filters);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("log-mel of 30 s: " << ms << " ms");
    CHECK(m30.cols() == 3000);
    const WhisperSpectrogram s = whisper_spectrogram(x, filters);
    CHECK(s.content_frames == 6500);
    CHECK(s.mel.cols() == 9500);
    CHECK(s.window_starts() == std::vector<int>{0, 3000, 6000});
    CHECK(s.window(6000).cols() == 3000);
    CHECK_THROWS_AS(s.window(6500), Error);
    // Frames past the audio are the log-mel of silence: the floor, max - 8, normalised.
    CHECK(((s.window(6000).rightCols(2400).array() - (s.mel.maxCoeff() - 2.0f)).abs() < 1e-5f).all());
    const WhisperSpectrogram empty = whisper_spectrogram({}, filters);
    CHECK(empty.content_frames == 0);
    CHECK(empty.window_starts() == std::vector<int>{0});
    std::vector<float> bad(1000, 0.0f);
    bad[5] = std::nanf("");
    CHECK_THROWS_AS(log_mel_spectrogram(bad, filters), Error);
  }

  TEST_CASE("window(seek) holds the recording's frames from seek on") {
    // A click at sample 160 f is at the centre of mel frame f (Hann weight 1) and 160 samples
    // from the centres of frames f - 1 and f + 1 (weight 0.095): the loudest column of each
    // window must be the frame its click was placed in, counted from the window's start.
    std::vector<float> x(16000 * 65, 0.0f);
    const int clicks[] = {1234, 3000 + 100, 6000 + 250};  // one per 30 s window
    for (const int f : clicks) x[static_cast<std::size_t>(160 * f)] = 0.5f;
    const WhisperSpectrogram s = whisper_spectrogram(x, mel_filters_slaney(16000, 400, 80));
    REQUIRE(s.window_starts() == std::vector<int>{0, 3000, 6000});
    for (const int seek : s.window_starts()) {
      CAPTURE(seek);
      const RowMatrixXf w = s.window(seek);
      REQUIRE(w.cols() == 3000);
      Eigen::Index loudest = -1;
      w.colwise().sum().maxCoeff(&loudest);
      CHECK(seek + loudest == clicks[seek / 3000]);
    }
  }
}
