#include <doctest/doctest.h>

#include <whisper/audio.hpp>

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include <Eigen/Dense>

#include "synthetic_files.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;
using whisper_test::Bytes;
using whisper_test::make_wav;
using whisper_test::pcm16;

namespace {

// Writes interleaved float frames with libsndfile's own writer (any SF_FORMAT_* it writes).
void write_with_libsndfile(const std::string& path, int format, int rate, int channels, const std::vector<float>& interleaved) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  REQUIRE(sf_format_check(&info));
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  REQUIRE_MESSAGE(f != nullptr, sf_strerror(nullptr));
  const sf_count_t frames = static_cast<sf_count_t>(interleaved.size()) / channels;
  CHECK(sf_writef_float(f, interleaved.data(), frames) == frames);
  REQUIRE(sf_close(f) == 0);
}

// Least-squares fit of x[n] ~ sum_j a_j sin(w_j n) + b_j cos(w_j n) over n in [first, last), w_j
// = 2 pi f_j / rate. Returns per tone (amplitude, phase of a sine), and the RMS residual.
struct ToneFit {
  std::vector<double> amplitude, phase;
  double residual_rms = 0;
};
ToneFit fit_tones(const std::vector<float>& x, std::size_t first, std::size_t last, double rate, const std::vector<double>& hz) {
  const Eigen::Index rows = static_cast<Eigen::Index>(last - first), cols = 2 * static_cast<Eigen::Index>(hz.size());
  Eigen::MatrixXd A(rows, cols);
  Eigen::VectorXd y(rows);
  for (Eigen::Index r = 0; r < rows; ++r) {
    const double n = static_cast<double>(first) + static_cast<double>(r);
    y(r) = x[first + static_cast<std::size_t>(r)];
    for (std::size_t j = 0; j < hz.size(); ++j) {
      A(r, 2 * static_cast<Eigen::Index>(j)) = std::sin(2 * std::numbers::pi * hz[j] * n / rate);
      A(r, 2 * static_cast<Eigen::Index>(j) + 1) = std::cos(2 * std::numbers::pi * hz[j] * n / rate);
    }
  }
  const Eigen::VectorXd c = A.colPivHouseholderQr().solve(y);
  ToneFit fit;
  for (std::size_t j = 0; j < hz.size(); ++j) {
    const double a = c(2 * static_cast<Eigen::Index>(j)), b = c(2 * static_cast<Eigen::Index>(j) + 1);
    fit.amplitude.push_back(std::hypot(a, b));
    fit.phase.push_back(std::atan2(b, a));
  }
  fit.residual_rms = std::sqrt((A * c - y).squaredNorm() / static_cast<double>(rows));
  return fit;
}

}  // namespace

TEST_SUITE("audio") {
  TEST_CASE("PCM16 mono round trip") {
    const auto bytes = make_wav(1, 1, 16000, 16, pcm16({0, 16384, -32768, 32767}));
    const Audio a = decode_audio(bytes);
    CHECK((a.info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_WAV);
    CHECK((a.info.format & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_16);
    CHECK(a.info.format_name.find("16 bit PCM") != std::string::npos);
    CHECK(a.info.channels == 1);
    CHECK(a.info.sample_rate == 16000);
    CHECK(a.info.frames == 4);
    REQUIRE(a.samples.size() == 4);
    CHECK(a.samples[0] == 0.0f);
    CHECK(a.samples[1] == 0.5f);
    CHECK(a.samples[2] == -1.0f);
    CHECK(a.samples[3] == doctest::Approx(32767.0 / 32768.0));
  }

  TEST_CASE("float32 stereo is averaged to mono, plain and EXTENSIBLE") {
    Bytes d;
    d.put(0.5f).put(-0.25f).put(1.0f).put(1.0f);
    for (bool ext : {false, true}) {
      const Audio a = decode_audio(make_wav(3, 2, 16000, 32, d.b, ext));
      CHECK((a.info.format & SF_FORMAT_SUBMASK) == SF_FORMAT_FLOAT);
      REQUIRE(a.samples.size() == 2);
      CHECK(a.samples[0] == 0.125f);
      CHECK(a.samples[1] == 1.0f);
    }
  }

  TEST_CASE("PCM24, PCM8 and EXTENSIBLE PCM16") {
    Bytes d;
    const std::uint8_t s24[6] = {0x00, 0x00, 0x40, 0x00, 0x00, 0xC0};  // +0.5, -0.5
    d.raw(s24, 6);
    const Audio a = decode_audio(make_wav(1, 1, 16000, 24, d.b));
    REQUIRE(a.samples.size() == 2);
    CHECK(a.samples[0] == 0.5f);
    CHECK(a.samples[1] == -0.5f);
    const Audio b = decode_audio(make_wav(1, 1, 16000, 16, pcm16({16384}), true));
    CHECK(b.samples.at(0) == 0.5f);
    const Audio c = decode_audio(make_wav(1, 1, 16000, 8, {0, 128, 192}));  // 8-bit PCM is unsigned
    CHECK(c.samples == std::vector<float>{-1.0f, 0.0f, 0.5f});
  }

  TEST_CASE("44.1 kHz is resampled to 16 kHz (load_audio_16k_mono)") {
    constexpr int kIn = 44100;
    constexpr double kHz = 440.0;
    std::vector<std::int16_t> s(kIn / 2);  // 0.5 s
    for (std::size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<std::int16_t>(std::lround(16000.0 * std::sin(2 * std::numbers::pi * kHz * i / kIn)));
    const whisper_test::TempFile file("441.wav");
    const std::string& path = file.path();
    whisper_test::write_file(path, make_wav(1, 1, kIn, 16, pcm16(s)));
    const std::vector<float> out = load_audio_16k_mono(path);
    CHECK(out.size() == 8000);
    double max_err = 0;
    for (std::size_t n = 200; n + 200 < out.size(); ++n)  // away from the edges
      max_err = std::max(max_err, std::abs(out[n] - 16000.0 / 32768.0 * std::sin(2 * std::numbers::pi * kHz * n / 16000.0)));
    CHECK(max_err < 2e-3);
  }

  TEST_CASE("8 kHz upsampling keeps a tone") {
    std::vector<float> in(8000);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(2 * std::numbers::pi * 1000.0 * i / 8000));
    const auto out = resample(in, 8000, 16000);
    REQUIRE(out.size() == 16000);
    double max_err = 0;
    for (std::size_t n = 400; n + 400 < out.size(); ++n)
      max_err = std::max(max_err, std::abs(out[n] - std::sin(2 * std::numbers::pi * 1000.0 * n / 16000.0)));
    CHECK(max_err < 2e-3);
  }

  TEST_CASE("an odd sample rate keeps a tone (fuzz finding: 767999 Hz)") {
    // fuzz.wav: a 48-byte WAV at 767999 Hz (no common divisor with 16 kHz) made the previous
    // resampler tabulate a 103 MB filter; libsoxr interpolates its coefficients for such ratios.
    // A 1 kHz tone: 0.05 s at 767999 Hz.
    constexpr int kIn = 767999;
    std::vector<float> in(38400);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(2 * std::numbers::pi * 1000.0 * i / kIn));
    const std::vector<float> out = resample(in, kIn, 16000);
    REQUIRE(out.size() == 800);  // round(38400 * 16000 / 767999) = round(800.001)
    double max_err = 0;
    for (std::size_t n = 100; n + 100 < out.size(); ++n)
      max_err = std::max(max_err, std::abs(out[n] - std::sin(2 * std::numbers::pi * 1000.0 * n / 16000.0)));
    CHECK(max_err < 2e-3);
    // The 48-byte file itself.
    const std::vector<float> tiny = to_16k_mono(decode_audio(make_wav(1, 1, kIn, 8, {128, 130, 126, 129})));
    CHECK(tiny.empty());  // round(4 * 16000 / 767999) = 0
  }

  TEST_CASE("resampled lengths are round(frames x 16000 / rate)") {
    for (const int rate : {8000, 11025, 22050, 44100, 48000, 767999}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{100}, std::size_t{22050}, std::size_t{44101}}) {
        CAPTURE(rate);
        CAPTURE(n);
        const std::vector<float> in(n, 0.25f);
        const double exact = static_cast<double>(n) * 16000.0 / rate;
        CHECK(std::abs(static_cast<double>(resample(in, rate, 16000).size()) - exact) <= 0.5);
      }
    }
    CHECK(resample({}, 44100, 16000).empty());
    CHECK_THROWS_AS(resample(std::vector<float>(4), 0, 16000), UnsupportedError);
  }

  TEST_CASE("FLAC written by libsndfile reads back sample for sample") {
    // 16-bit FLAC, stereo, 0.25 s at 16 kHz: a tone on the left, a ramp on the right; values on
    // the 16-bit grid, so the lossless round trip is exact and the mono mean is exact in float.
    constexpr int kFrames = 4000;
    std::vector<float> interleaved;
    std::vector<float> mono;
    for (int i = 0; i < kFrames; ++i) {
      const float l = static_cast<float>(std::lround(12000.0 * std::sin(2 * std::numbers::pi * 300.0 * i / 16000))) / 32768.0f;
      const float r = static_cast<float>((i * 7) % 4096 - 2048) / 32768.0f;
      interleaved.push_back(l);
      interleaved.push_back(r);
      mono.push_back(static_cast<float>((static_cast<double>(l) + r) / 2));
    }
    const whisper_test::TempFile file("stereo.flac");
    const std::string& path = file.path();
    write_with_libsndfile(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 2, interleaved);
    const auto bytes = read_file_bytes(path);
    const Audio a = decode_audio(bytes, path);
    CHECK((a.info.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_FLAC);
    CHECK(a.info.format_name.find("FLAC") != std::string::npos);
    CHECK(a.info.channels == 2);
    CHECK(a.info.sample_rate == 16000);
    CHECK(a.samples == mono);
    CHECK(load_audio_16k_mono(path) == mono);  // already 16 kHz: no resampling
  }

  TEST_CASE("stereo 44.1 kHz becomes 16 kHz mono: tones keep frequency and amplitude, the rest is filtered out") {
    // Left 0.5 sin(440 Hz); right 0.3 sin(1000 Hz) + 0.2 sin(12 kHz). The mono mean holds 0.25 at
    // 440 Hz, 0.15 at 1 kHz and 0.1 at 12 kHz, which is above 16 kHz's Nyquist frequency and would
    // alias to 4 kHz. Written as float WAV by libsndfile (no quantisation).
    // Bounds from libsoxr's documentation (soxr.h) of SOXR_HQ, as audio.hpp requests it: 20-bit
    // precision, passband to 0.913 x Nyquist (7.3 kHz) with SOXR_ROLLOFF_SMALL, "<= 0.01 dB".
    //  - amplitude: 0.01 dB is a factor 10^(0.01 / 20) = 1 + 1.15e-3;
    //  - everything else (aliasing of the 12 kHz tone, stopband leakage, rounding): 20 bits of
    //    precision, 2^-20 = 9.5e-7 of full scale; the residual of a fit of the two in-band tones
    //    must stay below 1e-5, ten times that. Aliasing of the 12 kHz tone suppressed by only 60 dB
    //    would leave 1e-4, a residual of 7e-5.
    //  - frequency: the rates are exact, so the tones are where they were; the phases fitted on the
    //    two halves of the signal agree, as a frequency error of 0.01 Hz would turn 0.25 s apart
    //    into 0.016 rad (the fit's own phase error is about residual / amplitude < 1e-4 rad).
    constexpr int kIn = 44100;
    constexpr int kFrames = kIn;  // 1 s
    std::vector<float> interleaved;
    for (int i = 0; i < kFrames; ++i) {
      const double t = static_cast<double>(i) / kIn;
      interleaved.push_back(static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 440.0 * t)));
      interleaved.push_back(static_cast<float>(0.3 * std::sin(2 * std::numbers::pi * 1000.0 * t) +
                                               0.2 * std::sin(2 * std::numbers::pi * 12000.0 * t)));
    }
    const whisper_test::TempFile file("stereo44100.wav");
    const std::string& path = file.path();
    write_with_libsndfile(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, kIn, 2, interleaved);
    const std::vector<float> out = load_audio_16k_mono(path);
    REQUIRE(out.size() == 16000);  // 44100 frames at 44.1 kHz = 1 s

    const double amplitude_tolerance = std::pow(10.0, 0.01 / 20) - 1;  // 1.15e-3
    const ToneFit all = fit_tones(out, 1000, 15000, 16000, {440.0, 1000.0});  // away from the edges
    MESSAGE("fitted amplitudes " << all.amplitude[0] << ", " << all.amplitude[1] << "; residual RMS " << all.residual_rms);
    CHECK(std::abs(all.amplitude[0] / 0.25 - 1) <= amplitude_tolerance);
    CHECK(std::abs(all.amplitude[1] / 0.15 - 1) <= amplitude_tolerance);
    CHECK(all.residual_rms < 1e-5);
    const ToneFit first = fit_tones(out, 1000, 8000, 16000, {440.0, 1000.0}),
                  second = fit_tones(out, 8000, 15000, 16000, {440.0, 1000.0});
    for (std::size_t j = 0; j < 2; ++j) {
      CAPTURE(j);
      CHECK(std::abs(std::remainder(second.phase[j] - first.phase[j], 2 * std::numbers::pi)) < 0.016);
    }
  }

  TEST_CASE("unsupported and malformed headers are refused with libsndfile's message") {
    CHECK_THROWS_WITH_AS(decode_audio(make_wav(2, 1, 16000, 16, pcm16({1}))), doctest::Contains("ADPCM"), FormatError);
    CHECK_THROWS_AS(decode_audio(make_wav(3, 1, 16000, 16, {0, 0})), FormatError);  // 16-bit float
    CHECK_THROWS_WITH_AS(decode_audio(make_wav(1, 0, 16000, 16, {})), doctest::Contains("Channel count is zero"), FormatError);
    CHECK_THROWS_AS(decode_audio(make_wav(1, 1, 0, 16, pcm16({1}))), FormatError);
    CHECK_THROWS_WITH_AS(decode_audio(make_wav(1, 1, 999, 16, pcm16({1}))), doctest::Contains("sample rate 999 Hz"),
                         UnsupportedError);
    CHECK_THROWS_WITH_AS(decode_audio(make_wav(1, 1, 768001, 16, pcm16({1}))), doctest::Contains("768001"), UnsupportedError);
    // 12-bit samples sit in 16-bit containers (block align 2): libsndfile reads them as 16-bit.
    CHECK(decode_audio(make_wav(1, 1, 16000, 12, pcm16({16384}))).samples == std::vector<float>{0.5f});
    const std::vector<std::uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '!'};
    CHECK_THROWS_WITH_AS(decode_audio(text, "notes.txt"), doctest::Contains("notes.txt: Format not recognised"), FormatError);
  }

  TEST_CASE("truncations and corrupt headers throw or read a prefix, never crash") {
    const auto good = make_wav(1, 2, 22050, 16, pcm16({1, 2, 3, 4, 5, 6, 7, 8}));
    const std::size_t data_start = good.size() - 16;  // 4 frames of 2 x 16 bits
    const std::vector<float> whole = decode_audio(good).samples;
    REQUIRE(whole.size() == 4);
    for (std::size_t n = 0; n < good.size(); ++n) {
      CAPTURE(n);
      const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      if (n <= data_start - 4) {
        // Cut before the 'data' chunk's size: no RIFF header, a short 'fmt ' chunk, no 'data' chunk.
        CHECK_THROWS_AS(decode_audio(cut), FormatError);
      } else {
        // Cut in the 'data' chunk's size or in the samples: libsndfile shortens the chunk to the
        // whole frames present (none when its size is cut).
        const std::size_t frames = n < data_start ? 0 : (n - data_start) / 4;
        const std::vector<float> prefix(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(frames));
        CHECK(decode_audio(cut).samples == prefix);
      }
    }
    auto bad = good;
    bad[0] = 'X';
    CHECK_THROWS_WITH_AS(decode_audio(bad), doctest::Contains("Format not recognised"), FormatError);
    bad = good;
    bad[8] = 'X';
    CHECK_THROWS_AS(decode_audio(bad), FormatError);
    // Random byte flips: decode or throw an Error, nothing else.
    whisper_test::Rng rng(7);
    int decoded = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      bad = good;
      for (int k = 0; k < 3; ++k) bad[rng.next() % bad.size()] = static_cast<std::uint8_t>(rng.next());
      try {
        (void)decode_audio(bad);
        ++decoded;
      } catch (const Error&) {
      }
    }
    MESSAGE(decoded << " of 2000 corrupted files still decoded");
    CHECK_THROWS_AS(load_audio_16k_mono(whisper_test::temp_path("does-not-exist.wav")), IoError);
  }

  TEST_CASE("a truncated or corrupt FLAC is a FormatError naming the file") {
    std::vector<float> x(20000);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(0.5 * std::sin(0.01 * static_cast<double>(i)));
    const whisper_test::TempFile file("tone.flac");
    const std::string& path = file.path();
    write_with_libsndfile(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, x);
    const auto good = read_file_bytes(path);
    REQUIRE(decode_audio(good).samples.size() == x.size());
    // Cut in the middle of an audio frame: libFLAC loses sync on the partial frame.
    const std::vector<std::uint8_t> half(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
    CHECK_THROWS_WITH_AS(decode_audio(half, "half.flac"), doctest::Contains("half.flac: Error : flac decoder lost sync"), FormatError);
    // Cut right after STREAMINFO ("fLaC", a 4-byte block header, 34 bytes), before any audio frame:
    // nothing fails to decode, but STREAMINFO announced 20000 frames.
    const std::vector<std::uint8_t> no_frames(good.begin(), good.begin() + 42);
    CHECK_THROWS_WITH_AS(decode_audio(no_frames, "cut.flac"),
                         doctest::Contains("cut.flac: truncated: the header announces 20000 frames, 0 could be decoded"), FormatError);
    // Cut in the metadata: libsndfile's own message.
    const std::vector<std::uint8_t> head(good.begin(), good.begin() + 20);
    CHECK_THROWS_WITH_AS(decode_audio(head, "head.flac"), doctest::Contains("head.flac: "), FormatError);
    // Audio frames overwritten: libFLAC loses sync there; libsndfile reports it during the read
    // (and would clear it at the next one: decode_audio checks after every read).
    for (const std::size_t at : {good.size() / 3, good.size() / 2, good.size() - 200}) {
      CAPTURE(at);
      auto corrupt = good;
      for (std::size_t i = at; i < at + 64; ++i) corrupt[i] ^= 0x5A;
      CHECK_THROWS_WITH_AS(decode_audio(corrupt, "corrupt.flac"), doctest::Contains("corrupt.flac: Error : flac decoder lost sync"),
                           FormatError);
    }
  }

  TEST_CASE("a header's frame count is not believed: allocation follows the bytes, decoding stops at max_frames") {
    // A 'data' chunk claiming 4 GiB in a 76-byte file: libsndfile shortens it to the bytes present,
    // and the samples are never reserved beyond one per byte of the file.
    Bytes d;
    for (int i = 0; i < 10; ++i) d.put<std::int16_t>(1000);
    auto big = make_wav(1, 1, 16000, 16, d.b);
    const std::uint32_t huge = 0xFFFFFFF0u;
    std::memcpy(&big[big.size() - d.b.size() - 4], &huge, 4);
    const Audio a = decode_audio(big);
    CHECK(a.samples.size() == 10);
    CHECK(a.samples.capacity() <= big.size());
    // A decoded length above max_frames is refused (a compressed file may describe far more
    // samples than it has bytes).
    const auto eight = make_wav(1, 1, 16000, 16, pcm16({1, 2, 3, 4, 5, 6, 7, 8}));
    CHECK(decode_audio(eight, "eight.wav", 8).samples.size() == 8);
    CHECK_THROWS_WITH_AS(decode_audio(eight, "eight.wav", 7), doctest::Contains("more than 7 frames"), UnsupportedError);
  }

  TEST_CASE("max_frames holds at 16 kHz too: a low-rate file is refused before resampling multiplies it (fuzz finding)") {
    // fuzz.wav: a few KiB of FLAC at 1 kHz decode to a million frames of silence, 16 million
    // once at 16 kHz (tests/fuzz/corpus/wav/finding-flac-1khz-resampled-16x). At 1 kHz,
    // max_frames = 16000 leaves 1000 frames, which resample to 16000.
    for (const int frames : {1000, 1001}) {
      CAPTURE(frames);
      const whisper_test::TempFile file("silence-1khz.flac");
      write_with_libsndfile(file.path(), SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1000, 1, std::vector<float>(static_cast<std::size_t>(frames)));
      const auto bytes = read_file_bytes(file.path());
      if (frames == 1000) {
        const Audio a = decode_audio(bytes, "silence.flac", 16000);
        CHECK(a.samples.size() == 1000);
        CHECK(to_16k_mono(a).size() == 16000);
      } else {
        CHECK_THROWS_WITH_AS(decode_audio(bytes, "silence.flac", 16000),
                             doctest::Contains("silence.flac: more than 1000 frames of audio at 1000 Hz (16000 at most, at 16 kHz too)"),
                             UnsupportedError);
      }
    }
    // At 16 kHz and above the bound is max_frames itself; below, floor(max_frames x rate / 16000),
    // without overflow for any max_frames.
    CHECK(frames_within_16k(7, 44100) == 7);
    CHECK(frames_within_16k(7, 16000) == 7);
    CHECK(frames_within_16k(16001, 8000) == 8000);
    CHECK(frames_within_16k(kDefaultMaxAudioFrames, 1000) == kDefaultMaxAudioFrames / 16);
    const std::size_t most = std::numeric_limits<std::size_t>::max();
    CHECK(frames_within_16k(most, 15999) == static_cast<std::size_t>(static_cast<unsigned __int128>(most) * 15999 / 16000));
  }

  TEST_CASE("a LIST chunk claiming more bytes than the file is refused before libsndfile sees it (fuzz finding)") {
    // fuzz.wav (tests/fuzz/corpus/wav/finding-libsndfile-list-chunk-hang): 165 bytes whose LIST
    // chunk claims 0x53494C03 bytes kept libsndfile 1.2.0's sf_open busy past libFuzzer's 30 s timeout
    // (libsndfile issue 1118). decode_audio checks a RIFF/WAVE file's chunk sizes first.
    const std::vector<std::uint8_t> hang = {
        0x52, 0x49, 0x46, 0x46, 0x70, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20, 0x10, 0x00,
        0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0xfc, 0x01, 0x00, 0x08, 0x00, 0x40, 0x00,
        0x4c, 0x49, 0x53, 0x54, 0x03, 0x4c, 0x49, 0x53, 0x54, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x61, 0x62, 0x63, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66,
        0x6d, 0x74, 0x20, 0x10, 0x00, 0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0xfc, 0x7f,
        0xa4, 0xd2, 0xaf,
    };
    REQUIRE(hang.size() == 165);
    CHECK_THROWS_WITH_AS(decode_audio(hang, "hang.wav"),
                         doctest::Contains("hang.wav: truncated or corrupt: chunk 'LIST' declares 1397312515 bytes, 121 left"), FormatError);
    // The same rule on a well-formed file whose LIST chunk is made too long; a 'data' chunk that is
    // too long is libsndfile's to shorten (the truncation test).
    auto list = make_wav(1, 1, 16000, 16, pcm16({1, 2}));
    const std::uint32_t too_long = 1000;
    std::memcpy(&list[12 + 8 + 16 + 4], &too_long, 4);  // RIFF header, fmt chunk, then LIST's size
    CHECK_THROWS_WITH_AS(decode_audio(list), doctest::Contains("chunk 'LIST' declares 1000 bytes"), FormatError);
    // fuzz.wav again (corpus/wav/finding-libsndfile-rf64-list-chunk-hang): the same bytes headed
    // RF64 kept libsndfile's RF64 reader in sf_open past 60 s. RF64 and BW64 use RIFF's
    // little-endian sizes, RIFX big-endian ones.
    for (const char* container : {"RF64", "BW64"}) {
      CAPTURE(container);
      auto rf64 = hang;
      std::memcpy(rf64.data(), container, 4);
      CHECK_THROWS_WITH_AS(decode_audio(rf64, "hang.wav"), doctest::Contains("chunk 'LIST' declares 1397312515 bytes, 121 left"),
                           FormatError);
    }
    auto rifx = list;
    std::memcpy(rifx.data(), "RIFX", 4);
    const std::uint8_t big_endian_1000[4] = {0, 0, 0x03, 0xe8};
    std::memcpy(&rifx[12 + 8 + 16 + 4], big_endian_1000, 4);
    const std::uint8_t big_endian_16[4] = {0, 0, 0, 16};
    std::memcpy(&rifx[12 + 4], big_endian_16, 4);  // fmt's size as RIFX writes it: the walk reaches LIST
    CHECK_THROWS_WITH_AS(decode_audio(rifx), doctest::Contains("chunk 'LIST' declares 1000 bytes"), FormatError);
  }

  TEST_CASE("a LIST chunk whose sub-chunk sizes would wrap libsndfile's byte count is refused (fuzz finding)") {
    // fuzz.wav (corpus/wav/finding-libsndfile-list-subchunk-size-wrap): 86 bytes whose LIST chunk
    // fits in the file, typed "abc\0", then 0xFFFFFFF7: libsndfile 1.2.0 read the type as a
    // sub-chunk id and 0xFFFFFFF7 as its size, its 32-bit count wrapped, and sf_open looped.
    const std::vector<std::uint8_t> wrap = {
        0x52, 0x49, 0x46, 0x46, 0x70, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20, 0x10, 0x00,
        0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0xf4, 0x01, 0x00, 0x08, 0x00, 0x40, 0x00,
        0x4c, 0x49, 0x53, 0x54, 0x23, 0x00, 0x00, 0x00, 0x61, 0x62, 0x63, 0x00, 0xf7, 0xff, 0xff, 0xff, 0x40, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x09, 0x52, 0x49, 0x46, 0x58, 0x00, 0xc0,
        0x76, 0x43, 0xd1, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x44, 0xb7, 0xf2, 0xbf, 0xd2, 0xbf,
    };
    REQUIRE(wrap.size() == 86);
    CHECK_THROWS_WITH_AS(decode_audio(wrap, "wrap.wav"),
                         doctest::Contains("wrap.wav: corrupt LIST chunk: its list type is not four printable characters"),
                         FormatError);

    // A well-formed file with a LIST/INFO chunk: an odd-sized INAM (its pad byte inside the list)
    // and an odd-sized ICMT whose pad byte the writer left out at the end of the list.
    const auto with_list = [](const std::vector<std::uint8_t>& list_body) {
      auto wav = make_wav(1, 1, 16000, 16, pcm16({1, -2, 3}));
      const std::size_t list_at = 12 + 8 + 16;  // RIFF header, fmt chunk
      REQUIRE(std::memcmp(&wav[list_at], "LIST", 4) == 0);
      wav.erase(wav.begin() + list_at + 8, wav.begin() + list_at + 8 + 4);  // "abc" and its pad byte
      const auto size = static_cast<std::uint32_t>(list_body.size());
      std::memcpy(&wav[list_at + 4], &size, 4);
      std::vector<std::uint8_t> body = list_body;
      if (size & 1u) body.push_back(0);
      wav.insert(wav.begin() + list_at + 8, body.begin(), body.end());
      const auto riff = static_cast<std::uint32_t>(wav.size() - 8);
      std::memcpy(&wav[4], &riff, 4);
      return wav;
    };
    const auto info = Bytes{}.str("INFO").str("INAM").put<std::uint32_t>(3).str("abc").put<std::uint8_t>(0)
                          .str("ICMT").put<std::uint32_t>(5).str("hello").b;
    const Audio a = decode_audio(with_list(info));
    CHECK(a.samples.size() == 3);

    // The rule on both views of a list: a sub-chunk larger than the list, a sub-chunk size that
    // wraps a 32-bit count, and a sub-chunk id that libsndfile would read as such a size (the
    // first one after an unknown list type).
    CHECK_THROWS_WITH_AS(decode_audio(with_list(Bytes{}.str("INFO").str("INAM").put<std::uint32_t>(40).str("abcd").b)),
                         doctest::Contains("corrupt LIST chunk: sub-chunk 'INAM' declares 40 bytes, 4 left in the list"),
                         FormatError);
    CHECK_THROWS_WITH_AS(decode_audio(with_list(Bytes{}.str("INFO").str("INAM").put<std::uint32_t>(0xFFFFFFF7u).str("abcd").b)),
                         doctest::Contains("sub-chunk 'INAM' declares 4294967287 bytes"), FormatError);
    CHECK_THROWS_WITH_AS(decode_audio(with_list(Bytes{}.str("abcd").put<std::uint32_t>(0xFFFFFFF7u).put<std::uint32_t>(0).b)),
                         doctest::Contains("corrupt LIST chunk: a sub-chunk id at byte 4 is not four printable characters"),
                         FormatError);
  }

  TEST_CASE("well-formed RF64 and RIFX files, written by libsndfile, pass the chunk check and decode") {
    // RF64 writes 0xFFFFFFFF as the 'data' size (the real one is in 'ds64'); RIFX big-endian sizes.
    std::vector<float> samples;
    for (int i = 0; i < 1601; ++i) samples.push_back(static_cast<float>(16 * (i % 200 - 100)) / 32768.0f);  // exact in 16 bits
    for (const int format : {SF_FORMAT_RF64 | SF_FORMAT_PCM_16, SF_FORMAT_WAV | SF_ENDIAN_BIG | SF_FORMAT_PCM_16}) {
      CAPTURE(format);
      const whisper_test::TempFile file("container.wav");
      write_with_libsndfile(file.path(), format, 16000, 1, samples);
      const Audio a = decode_audio(read_file_bytes(file.path()), file.path());
      CHECK((a.info.format & SF_FORMAT_TYPEMASK) == (format & SF_FORMAT_TYPEMASK));
      CHECK(a.samples == samples);
    }
  }

  TEST_CASE("a float64 sample beyond float's range is refused, not made infinite (fuzz finding)") {
    // fuzz.wav: -1e300 is a finite double; as a float it is infinite.
    for (const double big : {-1e300, 1e39}) {
      CAPTURE(big);
      Bytes d;
      d.put(0.25).put(big);
      CHECK_THROWS_WITH_AS(decode_audio(make_wav(3, 1, 16000, 64, d.b)), doctest::Contains("sample 1 of channel 0"), FormatError);
    }
    // The largest float is still a float, and so is the mean of two of them (summed in float, it
    // was infinite).
    const float top = std::numeric_limits<float>::max();
    Bytes edge;
    edge.put(static_cast<double>(top)).put(-static_cast<double>(top));
    CHECK(decode_audio(make_wav(3, 1, 16000, 64, edge.b)).samples == std::vector<float>{top, -top});
    Bytes stereo;
    stereo.put(top).put(top);
    CHECK(decode_audio(make_wav(3, 2, 16000, 32, stereo.b)).samples == std::vector<float>{top});
  }

  TEST_CASE("jfk.wav") {
    const std::string path = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(path)) return;
    const auto bytes = read_file_bytes(path);
    const Audio a = decode_audio(bytes);
    CHECK(a.info.sample_rate == 16000);
    CHECK(a.info.channels == 1);
    CHECK(a.samples.size() == 176000);
  }
}
