// Audio input: any file libsndfile reads (WAV in all its PCM/float variants, FLAC, Ogg
// Vorbis/Opus, MP3, AIFF, AU, ...), decoded from memory through sf_open_virtual, averaged to mono, and
// brought to Whisper's 16 kHz by libsoxr (high quality: 20-bit precision, linear phase,
// passband flat to 0.01 dB up to 91.3% of the lower Nyquist frequency).
//
// A file never makes us allocate more than it could describe: the frame count a header claims
// is not believed; samples are read in fixed-size chunks until libsndfile reports the end, and
// only what was decoded is kept (a compressed format may decode to more samples than it has
// bytes; `max_frames` bounds that, at the file's rate and at 16 kHz alike). Bad input throws
// FormatError / UnsupportedError with libsndfile's or libsoxr's own message.
#pragma once

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "byte_reader.hpp"
#include "error.hpp"

namespace polyattn::whisper {

inline constexpr int kWhisperSampleRate = 16000;

// Rates outside this range are refused: a 1 Hz header would make a few bytes of samples a
// recording 16000 times longer at 16 kHz.
inline constexpr int kMinAudioRate = 1000, kMaxAudioRate = 768000;

// Decoded frames (samples per channel) at most, by default: 2^31, 37 h at 16 kHz, 8 GiB of mono
// float. A compressed file can describe far more samples than it has bytes.
// The bound holds at the file's rate and at 16 kHz: a few KiB of FLAC at 1 kHz decode to a million
// frames that resampling makes 16 million (found by fuzz_wav).
inline constexpr std::size_t kDefaultMaxAudioFrames = std::size_t{1} << 31;

struct AudioInfo {
  int format = 0;         // libsndfile's SF_FORMAT_* (container | encoding)
  std::string format_name;  // e.g. "WAV (Microsoft) / Signed 16 bit PCM"
  int channels = 0;
  int sample_rate = 0;
  std::size_t frames = 0;  // frames decoded (samples per channel)
};

struct Audio {
  AudioInfo info;
  std::vector<float> samples;  // mono, at info.sample_rate; integer PCM scaled to [-1, 1)
};

namespace detail {

// libsndfile's virtual I/O over a byte span (read only).
struct SfMemory {
  std::span<const std::uint8_t> bytes;
  sf_count_t pos = 0;

  static SfMemory& of(void* p) { return *static_cast<SfMemory*>(p); }
  static sf_count_t size(void* p) { return static_cast<sf_count_t>(of(p).bytes.size()); }
  static sf_count_t seek(sf_count_t offset, int whence, void* p) {
    SfMemory& m = of(p);
    const sf_count_t n = static_cast<sf_count_t>(m.bytes.size());
    sf_count_t base = 0;
    if (whence == SEEK_CUR) base = m.pos;
    else if (whence == SEEK_END) base = n;
    else if (whence != SEEK_SET) return -1;
    // Overflow-safe: offset is any 64-bit value a corrupt header computed.
    if ((offset > 0 && base > std::numeric_limits<sf_count_t>::max() - offset) || base + offset < 0) return -1;
    m.pos = base + offset;  // past the end is allowed, as for a file; reads there return 0
    return m.pos;
  }
  static sf_count_t read(void* dst, sf_count_t count, void* p) {
    SfMemory& m = of(p);
    const sf_count_t n = static_cast<sf_count_t>(m.bytes.size());
    if (count <= 0 || m.pos >= n) return 0;
    const sf_count_t k = std::min(count, n - m.pos);
    std::memcpy(dst, m.bytes.data() + m.pos, static_cast<std::size_t>(k));
    m.pos += k;
    return k;
  }
  static sf_count_t write(const void*, sf_count_t, void*) { return 0; }
  static sf_count_t tell(void* p) { return of(p).pos; }
};

struct SfClose {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

inline std::string sf_format_name(int format) {
  std::string name;
  for (const int part : {format & SF_FORMAT_TYPEMASK, format & SF_FORMAT_SUBMASK}) {
    SF_FORMAT_INFO fi{};
    fi.format = part;
    if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &fi, sizeof fi) == 0 && fi.name) name += (name.empty() ? "" : " / ") + std::string(fi.name);
  }
  return name.empty() ? "format " + std::to_string(format) : name;
}

// libsndfile 1.2 stays in sf_open for over 30 s (stopped there) on a RIFF/WAVE file of 165 bytes whose
// LIST/INFO chunk claims a huge size (found by fuzz_wav; libsndfile issue 1118, open upstream,
// whose backtrace shows its sub-chunk parser walking the claimed size), and on the same bytes
// headed RF64 (found by fuzz_wav again: its RF64 reader shares that parser). So the top-level
// chunks of every RIFF-family WAVE file are checked first, as the previous WAV reader did: RIFF,
// RF64 and BW64 (little-endian sizes) and RIFX (big-endian). Each chunk must fit in the file,
// except 'data', which libsndfile shortens to the whole frames present (and whose size is
// 0xFFFFFFFF in RF64, the real one being in 'ds64').
//
// A LIST chunk is checked inside too (check_list_chunk): fuzz_wav found an 86-byte file whose LIST
// fits in the file but holds a sub-chunk size of 0xFFFFFFF7, which libsndfile's sub-chunk parser
// (wavlike_subchunk_parse) adds to a 32-bit byte count: the sum wraps, the parser jumps back 8
// bytes to the same sub-chunk, and sf_open never returns.
inline std::uint32_t riff_size(const std::uint8_t* s, bool big_endian) {
  return big_endian ? std::uint32_t{s[0]} << 24 | std::uint32_t{s[1]} << 16 | std::uint32_t{s[2]} << 8 | s[3]
                    : std::uint32_t{s[3]} << 24 | std::uint32_t{s[2]} << 16 | std::uint32_t{s[1]} << 8 | s[0];
}

// A chunk id as RIFF defines it: four characters from space to '~'.
inline bool is_fourcc(const std::uint8_t* id) {
  return std::all_of(id, id + 4, [](std::uint8_t c) { return c >= 0x20 && c <= 0x7e; });
}

// Walks the chunks of `bytes` from `pos`: each an 8-byte header (id, size) and its data, padded to
// an even length (the pad byte may be missing at the end). Calls on_chunk(id, size, data, left) for
// each: `data` the offset of its data, `left` the bytes from there to the end. The walk stops where
// on_chunk returns false or the chunk does not fit (on_chunk decides whether that is an error).
template <class F>
inline void walk_riff_chunks(std::span<const std::uint8_t> bytes, std::size_t pos, bool big_endian, F&& on_chunk) {
  while (bytes.size() - pos >= 8) {
    const std::uint8_t* id = bytes.data() + pos;
    const std::uint32_t size = riff_size(id + 4, big_endian);
    pos += 8;
    const std::size_t left = bytes.size() - pos;
    if (!on_chunk(id, size, pos, left) || size > left) return;
    pos += size;
    if ((size & 1u) && pos < bytes.size()) ++pos;  // pad byte
  }
}

inline std::string chunk_id(const std::uint8_t* id) { return std::string(reinterpret_cast<const char*>(id), 4); }

// A LIST chunk's body (`list`: its 4-byte list type, then sub-chunks of id, size and data): the
// type and every sub-chunk id are FourCCs, and every sub-chunk lies within the list (its pad byte
// may be missing at the end). libsndfile reads the type, and for an unknown type the first
// sub-chunk's id, as a size too: a FourCC read as a size is below 0x7F7F7F7F, so no count wraps.
inline void check_list_chunk(std::span<const std::uint8_t> list, bool big_endian, const std::string& name) {
  const auto corrupt = [&](const std::string& what) {
    return FormatError(name + ": corrupt LIST chunk: " + what);
  };
  if (list.size() < 4) return;  // too short for a type: libsndfile skips it
  if (!is_fourcc(list.data())) throw corrupt("its list type is not four printable characters");
  walk_riff_chunks(list, 4, big_endian, [&](const std::uint8_t* id, std::uint32_t size, std::size_t data, std::size_t left) {
    if (!is_fourcc(id))
      throw corrupt("a sub-chunk id at byte " + std::to_string(data - 8) + " is not four printable characters");
    if (size > left)
      throw corrupt("sub-chunk '" + chunk_id(id) + "' declares " + std::to_string(size) + " bytes, " + std::to_string(left) +
                    " left in the list");
    return true;
  });
}

inline void check_riff_chunks(std::span<const std::uint8_t> bytes, const std::string& name) {
  if (bytes.size() < 12 || std::memcmp(bytes.data() + 8, "WAVE", 4) != 0) return;
  const auto container = [&](const char* id) { return std::memcmp(bytes.data(), id, 4) == 0; };
  const bool big_endian = container("RIFX");
  if (!big_endian && !container("RIFF") && !container("RF64") && !container("BW64")) return;
  walk_riff_chunks(bytes, 12, big_endian, [&](const std::uint8_t* id_bytes, std::uint32_t size, std::size_t data, std::size_t left) {
    const std::string id = chunk_id(id_bytes);
    if (size > left) {
      if (id == "data") return false;
      throw FormatError(name + ": truncated or corrupt: chunk '" + id + "' declares " + std::to_string(size) + " bytes, " +
                        std::to_string(left) + " left");
    }
    if (id == "LIST") check_list_chunk(bytes.subspan(data, size), big_endian, name);
    return true;
  });
}

}  // namespace detail

// Frames at `rate` that stay within `max_frames` once brought to 16 kHz as well:
// floor(max_frames x rate / 16000) below 16 kHz, computed without overflow.
inline std::size_t frames_within_16k(std::size_t max_frames, int rate) {
  if (rate >= kWhisperSampleRate) return max_frames;
  const std::size_t r = static_cast<std::size_t>(rate), w = kWhisperSampleRate;
  return max_frames / w * r + max_frames % w * r / w;
}

// Decodes an audio file held in memory; returns mono samples at the file's own rate: at most
// `max_frames`, and at most `max_frames` once resampled to 16 kHz. `name` names the file in
// messages.
inline Audio decode_audio(std::span<const std::uint8_t> bytes, const std::string& name = "audio file",
                          std::size_t max_frames = kDefaultMaxAudioFrames) {
  detail::check_riff_chunks(bytes, name);
  detail::SfMemory memory{bytes};
  SF_VIRTUAL_IO io{&detail::SfMemory::size, &detail::SfMemory::seek, &detail::SfMemory::read, &detail::SfMemory::write,
                   &detail::SfMemory::tell};
  SF_INFO sfinfo{};  // format 0: libsndfile detects it
  const std::unique_ptr<SNDFILE, detail::SfClose> sf(sf_open_virtual(&io, SFM_READ, &sfinfo, &memory));
  if (!sf) throw FormatError(name + ": " + sf_strerror(nullptr));

  Audio out;
  AudioInfo& info = out.info;
  info.format = sfinfo.format;
  info.format_name = detail::sf_format_name(sfinfo.format);
  info.channels = sfinfo.channels;
  if (sfinfo.channels < 1)
    throw UnsupportedError(name + ": channel count " + std::to_string(sfinfo.channels) + " is not at least 1");
  if (sfinfo.samplerate < kMinAudioRate || sfinfo.samplerate > kMaxAudioRate)
    throw UnsupportedError(name + ": sample rate " + std::to_string(sfinfo.samplerate) + " Hz is not in [" +
                           std::to_string(kMinAudioRate) + ", " + std::to_string(kMaxAudioRate) + "]");
  info.sample_rate = sfinfo.samplerate;
  const std::size_t frame_limit = frames_within_16k(max_frames, info.sample_rate);

  // Reserve what the header claims only up to one mono sample per byte of the file (an
  // uncompressed file holds at least one byte per frame); beyond that, the vector grows with what
  // is decoded.
  if (sfinfo.frames > 0)
    out.samples.reserve(static_cast<std::size_t>(std::min<sf_count_t>(sfinfo.frames, static_cast<sf_count_t>(bytes.size()))));

  // Chunks of about 64 Ki samples, whatever the channel count (libsndfile allows up to 1024).
  const std::size_t channels = static_cast<std::size_t>(sfinfo.channels);
  const std::size_t chunk_frames = std::max<std::size_t>(1, (std::size_t{1} << 16) / channels);
  std::vector<float> chunk(chunk_frames * channels);
  for (;;) {
    const sf_count_t got = sf_readf_float(sf.get(), chunk.data(), static_cast<sf_count_t>(chunk_frames));
    if (got < 0 || static_cast<std::size_t>(got) > chunk_frames)
      throw FormatError(name + ": libsndfile returned " + std::to_string(got) + " frames for a read of " +
                        std::to_string(chunk_frames));
    // A decoder error during this read (a FLAC frame whose CRC fails, lost sync, ...); the
    // next read would clear it.
    if (const int err = sf_error(sf.get()); err != SF_ERR_NO_ERROR) throw FormatError(name + ": " + sf_error_number(err));
    if (got == 0) break;
    const std::size_t n = static_cast<std::size_t>(got);
    if (n > frame_limit - out.samples.size())
      throw UnsupportedError(name + ": more than " + std::to_string(frame_limit) + " frames of audio at " +
                             std::to_string(info.sample_rate) + " Hz (" + std::to_string(max_frames) + " at most, at 16 kHz too)");
    for (std::size_t i = 0; i < n; ++i) {
      double acc = 0.0;  // in double: the channels' sum may pass float's range
      for (std::size_t c = 0; c < channels; ++c) {
        const float v = chunk[i * channels + c];
        if (!std::isfinite(v)) {
          char value[32];
          std::snprintf(value, sizeof value, "%g", static_cast<double>(v));
          // A float64 sample beyond float's range arrives here as an infinity.
          throw FormatError(name + ": sample " + std::to_string(out.samples.size()) + " of channel " + std::to_string(c) +
                            " = " + value + " is not a finite float");
        }
        acc += v;
      }
      out.samples.push_back(static_cast<float>(acc / static_cast<double>(channels)));
    }
  }
  info.frames = out.samples.size();
  // A header that announced more frames than could be decoded: a truncated or corrupt stream
  // (a FLAC's STREAMINFO count, an Ogg's last granule position; libsndfile itself shortens a WAV
  // 'data' chunk to the bytes present). An MPEG file's length is an estimate without a Xing/LAME
  // header, so it is not held to it.
  const bool exact_length = (sfinfo.format & SF_FORMAT_TYPEMASK) != SF_FORMAT_MPEG;
  if (exact_length && sfinfo.frames > 0 && sfinfo.frames != SF_COUNT_MAX &&
      static_cast<std::uint64_t>(sfinfo.frames) > info.frames)
    throw FormatError(name + ": truncated: the header announces " + std::to_string(sfinfo.frames) + " frames, " +
                      std::to_string(info.frames) + " could be decoded");
  return out;
}

// Mono float samples at `in_rate` to `out_rate` with libsoxr (SOXR_HQ). The output has
// round(n * out_rate / in_rate) samples, aligned with the input (linear phase, the filter's
// delay removed).
inline std::vector<float> resample(std::span<const float> in, int in_rate, int out_rate) {
  if (in_rate <= 0 || out_rate <= 0)
    throw UnsupportedError("resample: rates must be positive, got " + std::to_string(in_rate) + " -> " +
                           std::to_string(out_rate));
  if (in_rate == out_rate || in.empty()) return {in.begin(), in.end()};
  const double expected = std::round(static_cast<double>(in.size()) * out_rate / in_rate);
  std::vector<float> out(static_cast<std::size_t>(expected) + 1);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  std::size_t done = 0;
  const soxr_error_t err = soxr_oneshot(in_rate, out_rate, 1, in.data(), in.size(), nullptr, out.data(), out.size(), &done,
                                        &io, &quality, nullptr);
  if (err) throw UnsupportedError("resample " + std::to_string(in_rate) + " -> " + std::to_string(out_rate) + " Hz: " + err);
  out.resize(done);
  return out;
}

// Decoded audio as Whisper's front end takes it: mono samples at 16 kHz.
inline std::vector<float> to_16k_mono(Audio audio) {
  if (audio.info.sample_rate == kWhisperSampleRate) return std::move(audio.samples);
  return resample(audio.samples, audio.info.sample_rate, kWhisperSampleRate);
}

// Reads an audio file and returns mono float samples at 16 kHz, ready for log_mel_spectrogram.
inline std::vector<float> load_audio_16k_mono(const std::string& path) {
  return to_16k_mono(decode_audio(read_file_bytes(path), "audio file '" + path + "'"));
}

}  // namespace polyattn::whisper
