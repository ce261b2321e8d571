// WAV reader: RIFF/WAVE with PCM (8/16/24/32-bit integer, format 1) or IEEE float
// (32/64-bit, format 3), also wrapped in WAVE_FORMAT_EXTENSIBLE (0xFFFE). Channels are
// averaged to mono and the rate is converted to 16 kHz (resample.hpp), which is what the
// Whisper front end expects. Malformed input throws FormatError / UnsupportedError.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "byte_reader.hpp"
#include "error.hpp"
#include "resample.hpp"

namespace polyattn::whisper {

inline constexpr int kWhisperSampleRate = 16000;

struct WavInfo {
  int format = 0;           // 1 = PCM integer, 3 = IEEE float (after unwrapping EXTENSIBLE)
  int channels = 0;
  int sample_rate = 0;
  int bits_per_sample = 0;
  std::size_t frames = 0;   // samples per channel
};

struct WavAudio {
  WavInfo info;
  std::vector<float> samples;  // mono, in [-1, 1] for PCM, at info.sample_rate
};

// Parses a WAV file held in memory; returns mono samples at the file's own rate.
inline WavAudio parse_wav(std::span<const std::uint8_t> bytes, const std::string& name = "WAV file") {
  ByteReader r(bytes, name);
  if (r.size() < 12) r.fail("too short for a RIFF header (" + std::to_string(r.size()) + " bytes, need 12)");
  if (r.string(4, "RIFF id") != "RIFF") r.fail("not a RIFF file (first 4 bytes are not 'RIFF')");
  r.read<std::uint32_t>("RIFF size");  // often wrong in the wild; chunks are bounded by the file
  if (r.string(4, "WAVE id") != "WAVE") r.fail("RIFF form type is not 'WAVE'");

  std::optional<WavInfo> info;
  std::optional<std::span<const std::uint8_t>> data;
  while (!data) {
    if (r.remaining() < 8) r.fail(info ? "no 'data' chunk found" : "no 'fmt ' chunk found");
    const std::string id = r.string(4, "chunk id");
    const std::uint32_t size = r.read<std::uint32_t>("chunk size");
    if (size > r.remaining())
      r.fail("truncated: chunk '" + id + "' declares " + std::to_string(size) + " bytes, " +
             std::to_string(r.remaining()) + " left");
    const auto body = r.bytes(size, "chunk body");
    if ((size & 1u) && r.remaining() > 0) r.skip(1, "chunk pad byte");

    if (id == "fmt ") {
      ByteReader f(body, name + " 'fmt ' chunk");
      WavInfo wi;
      int tag = f.read<std::uint16_t>("format tag");
      wi.channels = f.read<std::uint16_t>("channels");
      const std::uint32_t rate = f.read<std::uint32_t>("sample rate");
      f.read<std::uint32_t>("byte rate");
      const int block_align = f.read<std::uint16_t>("block align");
      wi.bits_per_sample = f.read<std::uint16_t>("bits per sample");
      if (tag == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the real tag is in the sub-format GUID
        const int cb_size = f.read<std::uint16_t>("extension size");
        if (cb_size < 22) f.fail("WAVE_FORMAT_EXTENSIBLE extension is " + std::to_string(cb_size) + " bytes, need 22");
        f.read<std::uint16_t>("valid bits per sample");
        f.read<std::uint32_t>("channel mask");
        const auto guid = f.bytes(16, "sub-format GUID");
        static constexpr std::array<std::uint8_t, 14> kGuidTail = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                                                   0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
        if (!std::equal(kGuidTail.begin(), kGuidTail.end(), guid.begin() + 2))
          throw UnsupportedError(name + ": WAVE_FORMAT_EXTENSIBLE sub-format is not a KSDATAFORMAT GUID");
        tag = guid[0] | (guid[1] << 8);
      }
      if (tag != 1 && tag != 3)
        throw UnsupportedError(name + ": audio format tag " + std::to_string(tag) +
                               " is not supported (expected 1 = PCM or 3 = IEEE float)");
      wi.format = tag;
      const int bits = wi.bits_per_sample;
      if ((tag == 1 && bits != 8 && bits != 16 && bits != 24 && bits != 32) || (tag == 3 && bits != 32 && bits != 64))
        throw UnsupportedError(name + ": " + std::to_string(bits) + "-bit " + (tag == 1 ? "PCM" : "float") +
                               " is not supported (PCM: 8/16/24/32, float: 32/64)");
      if (wi.channels < 1 || wi.channels > 32)
        throw UnsupportedError(name + ": channel count " + std::to_string(wi.channels) + " is not in [1, 32]");
      if (rate < 1000 || rate > 768000)
        throw UnsupportedError(name + ": sample rate " + std::to_string(rate) + " Hz is not in [1000, 768000]");
      wi.sample_rate = static_cast<int>(rate);
      if (block_align != wi.channels * bits / 8)
        f.fail("block align " + std::to_string(block_align) + " does not match " + std::to_string(wi.channels) +
               " channels x " + std::to_string(bits) + " bits");
      info = wi;
    } else if (id == "data") {
      if (!info) r.fail("'data' chunk before the 'fmt ' chunk");
      data = body;
    }
    // Other chunks (LIST, fact, cue, ...) carry nothing the transcriber needs.
  }

  WavInfo wi = *info;
  const std::size_t bytes_per_sample = static_cast<std::size_t>(wi.bits_per_sample / 8);
  const std::size_t block = bytes_per_sample * static_cast<std::size_t>(wi.channels);
  if (data->size() % block != 0)
    r.fail("'data' chunk of " + std::to_string(data->size()) + " bytes is not a whole number of " +
           std::to_string(block) + "-byte frames (truncated?)");
  wi.frames = data->size() / block;

  WavAudio out;
  out.info = wi;
  out.samples.assign(wi.frames, 0.0f);
  const std::uint8_t* p = data->data();
  for (std::size_t i = 0; i < wi.frames; ++i) {
    double acc = 0.0;
    for (int c = 0; c < wi.channels; ++c, p += bytes_per_sample) {
      double v = 0.0;
      if (wi.format == 1) {
        switch (wi.bits_per_sample) {
          case 8: v = (static_cast<int>(p[0]) - 128) / 128.0; break;  // 8-bit PCM is unsigned
          case 16: { std::int16_t s; std::memcpy(&s, p, 2); v = s / 32768.0; break; }
          case 24: {
            const std::int32_t s = static_cast<std::int32_t>(static_cast<std::uint32_t>(p[0]) << 8 |
                                                             static_cast<std::uint32_t>(p[1]) << 16 |
                                                             static_cast<std::uint32_t>(p[2]) << 24) >> 8;
            v = s / 8388608.0;
            break;
          }
          default: { std::int32_t s; std::memcpy(&s, p, 4); v = s / 2147483648.0; break; }
        }
      } else if (wi.bits_per_sample == 32) {
        float s; std::memcpy(&s, p, 4); v = s;
      } else {
        double s; std::memcpy(&s, p, 8); v = s;
      }
      // A float64 sample must also fit a float: 1e300 is finite, but the float it is stored as is not.
      if (!(std::abs(v) <= static_cast<double>(std::numeric_limits<float>::max()))) {
        char value[32];
        std::snprintf(value, sizeof value, "%g", v);
        r.fail("sample " + std::to_string(i) + " of channel " + std::to_string(c) + " = " + value + " is not a finite float");
      }
      acc += v;
    }
    out.samples[i] = static_cast<float>(acc / wi.channels);  // in double: the channels' sum may pass float's range
  }
  return out;
}

// Parsed audio as Whisper's front end takes it: mono samples at 16 kHz.
inline std::vector<float> to_16k_mono(WavAudio audio) {
  if (audio.info.sample_rate == kWhisperSampleRate) return std::move(audio.samples);
  return resample(audio.samples, audio.info.sample_rate, kWhisperSampleRate);
}

// Reads a WAV file and returns mono float samples at 16 kHz, ready for log_mel_spectrogram.
inline std::vector<float> load_wav_16k_mono(const std::string& path) {
  return to_16k_mono(parse_wav(read_file_bytes(path), "WAV file '" + path + "'"));
}

}  // namespace polyattn::whisper
