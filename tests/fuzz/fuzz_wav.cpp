// libFuzzer harness: a WAV file, parsed (parse_wav) and brought to 16 kHz mono (to_16k_mono), as
// load_wav_16k_mono does for the CLI's --audio files.
// Invariants: one sample per frame, every sample finite, integer PCM within [-1, 1], and
// ceil(frames * 16000 / rate) samples after resampling, finite where the input is not near the
// float range (the resampler sums up to about 1700 weighted samples).
#include <whisper/wav.hpp>

#include <algorithm>
#include <cmath>

#include "harness.hpp"

namespace pw = polyattn::whisper;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    pw::WavAudio audio = pw::parse_wav(bytes);
    const pw::WavInfo info = audio.info;
    if (audio.samples.size() != info.frames)
      polyattn_fuzz::broken(std::to_string(audio.samples.size()) + " samples for " + std::to_string(info.frames) + " frames");
    float largest = 0;
    for (const float s : audio.samples) {
      if (!std::isfinite(s) || (info.format == 1 && std::abs(s) > 1.0f))
        polyattn_fuzz::broken("sample " + std::to_string(s) + " from " + std::to_string(info.bits_per_sample) + "-bit format " +
                              std::to_string(info.format));
      largest = std::max(largest, std::abs(s));
    }
    const std::vector<float> mono = pw::to_16k_mono(std::move(audio));
    const std::uint64_t rate = static_cast<std::uint64_t>(info.sample_rate);
    const std::uint64_t expected = (std::uint64_t{info.frames} * 16000 + rate - 1) / rate;
    if (mono.size() != expected)
      polyattn_fuzz::broken(std::to_string(mono.size()) + " samples at 16 kHz from " + std::to_string(info.frames) + " at " +
                            std::to_string(rate) + " Hz, expected " + std::to_string(expected));
    if (largest < 1e30f)
      for (const float s : mono)
        if (!std::isfinite(s)) polyattn_fuzz::broken("resampled sample is not finite");
  });
}
