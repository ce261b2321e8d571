#include <doctest/doctest.h>

#include <whisper/wav.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "synthetic_files.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;
using whisper_test::Bytes;
using whisper_test::make_wav;
using whisper_test::pcm16;

TEST_SUITE("wav") {
  TEST_CASE("PCM16 mono round trip") {
    const auto bytes = make_wav(1, 1, 16000, 16, pcm16({0, 16384, -32768, 32767}));
    const WavAudio a = parse_wav(bytes);
    CHECK(a.info.format == 1);
    CHECK(a.info.channels == 1);
    CHECK(a.info.sample_rate == 16000);
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
      const WavAudio a = parse_wav(make_wav(3, 2, 16000, 32, d.b, ext));
      CHECK(a.info.format == 3);
      REQUIRE(a.samples.size() == 2);
      CHECK(a.samples[0] == 0.125f);
      CHECK(a.samples[1] == 1.0f);
    }
  }

  TEST_CASE("PCM24 and EXTENSIBLE PCM16") {
    Bytes d;
    const std::uint8_t s24[6] = {0x00, 0x00, 0x40, 0x00, 0x00, 0xC0};  // +0.5, -0.5
    d.raw(s24, 6);
    const WavAudio a = parse_wav(make_wav(1, 1, 16000, 24, d.b));
    REQUIRE(a.samples.size() == 2);
    CHECK(a.samples[0] == 0.5f);
    CHECK(a.samples[1] == -0.5f);
    const WavAudio b = parse_wav(make_wav(1, 1, 16000, 16, pcm16({16384}), true));
    CHECK(b.samples.at(0) == 0.5f);
  }

  TEST_CASE("44.1 kHz is resampled to 16 kHz (load_wav_16k_mono)") {
    constexpr int kIn = 44100;
    constexpr double kHz = 440.0;
    std::vector<std::int16_t> s(kIn / 2);  // 0.5 s
    for (std::size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<std::int16_t>(std::lround(16000.0 * std::sin(2 * std::numbers::pi * kHz * i / kIn)));
    const std::string path = whisper_test::temp_path("441.wav");
    whisper_test::write_file(path, make_wav(1, 1, kIn, 16, pcm16(s)));
    const std::vector<float> out = load_wav_16k_mono(path);
    CHECK(out.size() == 8000);
    double max_err = 0;
    for (std::size_t n = 200; n + 200 < out.size(); ++n)  // away from the zero-padded edges
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

  TEST_CASE("an odd sample rate costs time, not a 103 MB table (fuzz finding)") {
    // fuzz.wav: a 48-byte WAV at 767999 Hz made the resampler tabulate 16000 phases of 1619 taps
    // (103 MB). Such rates compute each output's weights; common rates keep the table.
    CHECK(PolyphaseKernel(16000, 767999).table_floats() == 0);
    CHECK(PolyphaseKernel(160, 441).table_floats() == 160 * 95);  // 44.1 kHz -> 16 kHz
    const PolyphaseKernel table(160, 441), computed(160, 441, 0);
    REQUIRE(computed.table_floats() == 0);
    std::vector<float> a, b;
    for (int phase = 0; phase < 160; ++phase) {
      CAPTURE(phase);
      CHECK(std::ranges::equal(table.weights(phase, a), computed.weights(phase, b)));
    }
    // A 1 kHz tone through the computed weights: 0.05 s at 767999 Hz.
    constexpr int kIn = 767999;
    std::vector<float> in(38400);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(2 * std::numbers::pi * 1000.0 * i / kIn));
    const std::vector<float> out = resample(in, kIn, 16000);
    REQUIRE(out.size() == 801);  // ceil(38400 * 16000 / 767999)
    double max_err = 0;
    for (std::size_t n = 100; n + 100 < out.size(); ++n)
      max_err = std::max(max_err, std::abs(out[n] - std::sin(2 * std::numbers::pi * 1000.0 * n / 16000.0)));
    CHECK(max_err < 2e-3);
  }

  TEST_CASE("unsupported formats are refused by name") {
    CHECK_THROWS_AS(parse_wav(make_wav(2, 1, 16000, 16, pcm16({1}))), UnsupportedError);  // ADPCM
    CHECK_THROWS_WITH_AS(parse_wav(make_wav(1, 1, 16000, 12, {0, 0})), doctest::Contains("12-bit"), UnsupportedError);
    CHECK_THROWS_AS(parse_wav(make_wav(3, 1, 16000, 16, {0, 0})), UnsupportedError);
    CHECK_THROWS_AS(parse_wav(make_wav(1, 0, 16000, 16, {})), UnsupportedError);
    CHECK_THROWS_AS(parse_wav(make_wav(1, 1, 0, 16, pcm16({1}))), UnsupportedError);
  }

  TEST_CASE("every truncation and corrupt headers throw, never crash") {
    const auto good = make_wav(1, 2, 22050, 16, pcm16({1, 2, 3, 4, 5, 6, 7, 8}));
    for (std::size_t n = 0; n < good.size(); ++n) {
      const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
      CHECK_THROWS_AS(parse_wav(cut), Error);
    }
    auto bad = good;
    bad[0] = 'X';
    CHECK_THROWS_WITH_AS(parse_wav(bad), doctest::Contains("RIFF"), FormatError);
    bad = good;
    bad[8] = 'X';
    CHECK_THROWS_AS(parse_wav(bad), FormatError);
    // Random byte flips: parse or throw an Error, nothing else.
    whisper_test::Rng rng(7);
    for (int trial = 0; trial < 2000; ++trial) {
      bad = good;
      for (int k = 0; k < 3; ++k) bad[rng.next() % bad.size()] = static_cast<std::uint8_t>(rng.next());
      try {
        (void)parse_wav(bad);
      } catch (const Error&) {
      }
    }
    CHECK_THROWS_AS(load_wav_16k_mono(whisper_test::temp_path("does-not-exist.wav")), IoError);
  }

  TEST_CASE("a float64 sample beyond float's range is refused, not made infinite (fuzz finding)") {
    // fuzz.wav: -1e300 is a finite double, so the finiteness check passed and the sample became
    // -inf when stored as float.
    for (const double big : {-1e300, 1e39}) {
      CAPTURE(big);
      Bytes d;
      d.put(0.25).put(big);
      CHECK_THROWS_WITH_AS(parse_wav(make_wav(3, 1, 16000, 64, d.b)), doctest::Contains("sample 1 of channel 0"), FormatError);
    }
    // The largest float is still a float, and so is the mean of two of them (summed in float, it
    // was infinite).
    const float top = std::numeric_limits<float>::max();
    Bytes edge;
    edge.put(static_cast<double>(top)).put(-static_cast<double>(top));
    CHECK(parse_wav(make_wav(3, 1, 16000, 64, edge.b)).samples == std::vector<float>{top, -top});
    Bytes stereo;
    stereo.put(top).put(top);
    CHECK(parse_wav(make_wav(3, 2, 16000, 32, stereo.b)).samples == std::vector<float>{top});
  }

  TEST_CASE("jfk.wav") {
    const std::string path = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(path)) return;
    const auto bytes = read_file_bytes(path);
    const WavAudio a = parse_wav(bytes);
    CHECK(a.info.sample_rate == 16000);
    CHECK(a.info.channels == 1);
    CHECK(a.samples.size() == 176000);
  }
}
