// libFuzzer harness: an audio file decoded from memory by libsndfile through sf_open_virtual
// (decode_audio) and brought to 16 kHz mono by libsoxr (to_16k_mono), as load_audio_16k_mono does
// for the CLI's --audio files. libsndfile and libsoxr are the system's (not instrumented, so
// coverage guides the fuzzer through this project's code only: the virtual I/O callbacks, the
// chunked read and downmix, the checks); the sanitizers and the allocation budget still watch
// every call into them.
// Invariants: one sample per decoded frame, at most max_frames of them, and at most max_frames
// after resampling; every sample finite and integer PCM within [-1, 1]; round(frames * 16000 /
// rate) samples after resampling (floor or ceil of the exact length), finite where the input is
// not near the float range.
#include <whisper/audio.hpp>

#include <algorithm>
#include <cmath>

#include "harness.hpp"

namespace pw = polyattn::whisper;

namespace {

// Decoded frames at most, at the file's rate and at 16 kHz: a compressed format can describe far
// more samples than it has bytes, and the allocation budget (16 x input + 64 MiB) must hold the
// mono samples, their 16 kHz copy and libsndfile's own buffers.
constexpr std::size_t kMaxFrames = std::size_t{1} << 22;  // 16 MiB of mono float

bool is_integer_pcm(int format) {
  switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8:
    case SF_FORMAT_PCM_16:
    case SF_FORMAT_PCM_24:
    case SF_FORMAT_PCM_32:
    case SF_FORMAT_PCM_U8: return true;
    default: return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return polyattn_fuzz::run_one(data, size, [](std::span<const std::uint8_t> bytes) {
    pw::Audio audio = pw::decode_audio(bytes, "fuzz input", kMaxFrames);
    const pw::AudioInfo info = audio.info;
    if (audio.samples.size() != info.frames || info.frames > kMaxFrames)
      polyattn_fuzz::broken(std::to_string(audio.samples.size()) + " samples for " + std::to_string(info.frames) + " frames");
    if (info.channels < 1 || info.sample_rate < pw::kMinAudioRate || info.sample_rate > pw::kMaxAudioRate)
      polyattn_fuzz::broken("accepted " + std::to_string(info.channels) + " channels at " + std::to_string(info.sample_rate) + " Hz");
    float largest = 0;
    for (const float s : audio.samples) {
      if (!std::isfinite(s) || (is_integer_pcm(info.format) && std::abs(s) > 1.0f))
        polyattn_fuzz::broken("sample " + std::to_string(s) + " from " + info.format_name);
      largest = std::max(largest, std::abs(s));
    }
    const std::vector<float> mono = pw::to_16k_mono(std::move(audio));
    if (mono.size() > kMaxFrames)
      polyattn_fuzz::broken(std::to_string(mono.size()) + " samples at 16 kHz, more than max_frames");
    const double exact = static_cast<double>(info.frames) * 16000.0 / info.sample_rate;
    if (std::abs(static_cast<double>(mono.size()) - exact) > 1.0 ||
        (info.sample_rate == 16000 && mono.size() != info.frames))
      polyattn_fuzz::broken(std::to_string(mono.size()) + " samples at 16 kHz from " + std::to_string(info.frames) + " at " +
                            std::to_string(info.sample_rate) + " Hz, expected about " + std::to_string(exact));
    if (largest < 1e30f)
      for (const float s : mono)
        if (!std::isfinite(s)) polyattn_fuzz::broken("resampled sample is not finite");
  });
}
